"""mixed_precision=auto on the machine it runs on: bf16 on a GPU or on a CPU that multiplies bf16 natively (AMX-BF16,
AVX512-BF16), fp32 elsewhere; the store keys a run by the precision it trains in; `--amp` evaluation on such a CPU. The
tests of what only a bf16 unit runs skip elsewhere and say so; the others pretend either machine (monkeypatch), so
they assert the same thing on every CPU."""

import json

import numpy as np
import pytest
import torch

from conftest import BFLOAT16
from cse_kit.environment import bf16_unit_of, cpu_bf16_unit, cpu_flags
from cse_kit.results import ResultStore
from cse_kit.train import build_config, train
from cse_kit.train import precision

NO_BF16_UNIT = "this CPU has no bf16 unit (AMX-BF16 or AVX512-BF16 in /proc/cpuinfo): bf16 would be emulated here"
needs_bf16_unit = pytest.mark.skipif(torch.cuda.is_available() or cpu_bf16_unit() is None, reason=NO_BF16_UNIT)


def test_the_unit_is_read_from_the_cpu_flags_the_fastest_first():
    sapphire_rapids = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
    zen4 = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 avx512_vnni\n"
    skylake = "processor\t: 0\nflags\t\t: fpu avx2 avx512f\n"
    assert bf16_unit_of(cpu_flags(sapphire_rapids)) == "AMX-BF16"
    assert bf16_unit_of(cpu_flags(zen4)) == "AVX512-BF16"
    assert bf16_unit_of(cpu_flags(skylake)) is None and cpu_flags("") == set()


@pytest.mark.parametrize("unit, resolved", [("AMX-BF16", "bf16"), ("AVX512-BF16", "bf16"), (None, "no")])
def test_auto_is_bf16_on_a_cpu_with_a_bf16_unit_and_fp32_elsewhere(monkeypatch, unit, resolved):
    monkeypatch.setattr(precision, "cpu_bf16_unit", lambda: unit)
    assert precision.resolve_precision("auto", cuda=False) == resolved
    assert precision.unit_words(resolved, cuda=False) == (f" on {unit}" if unit else "")
    # fp16 is Accelerate's on accelerators only: fp32 on a CPU (the header says why: presets.precision_words)
    assert [precision.resolve_precision(s, cuda=False) for s in ("no", "bf16", "fp16")] == ["no", "bf16", "no"]


def test_the_cpu_and_paper_profiles_train_in_auto_the_smoke_profile_in_fp32():
    """The smoke profile's tiny models gain nothing from bf16, and its runs must give the same numbers on every CPU."""
    assert build_config("simcse-bert", "cpu").mixed_precision == "auto"
    assert build_config("simcse-bert", "paper").mixed_precision == "auto"
    assert build_config("simcse-bert", "smoke").mixed_precision == "no"
    # the -official presets' fp16 (the official --fp16 runs) needs CUDA: the cpu profile runs them in auto too
    assert build_config("diffaug-semi-bert-official", "cpu").mixed_precision == "auto"


def _keys(store, settings=("auto", "no", "bf16", "fp16")) -> dict[str, str]:
    return {setting: store.key(build_config("simcse-bert", "cpu", {"mixed_precision": setting})) for setting in settings}


@pytest.mark.parametrize("unit", ["AMX-BF16", None])
def test_the_store_keys_a_run_by_the_precision_it_trains_in(monkeypatch, tmp_path, unit):
    """auto is keyed as what it resolves to (bf16 on a CPU with a bf16 unit, else fp32), fp16 on a CPU as fp32 (what
    it trains in there), so a store two machines share never shows one machine's bf16 run for another's fp32 one."""
    monkeypatch.setattr(precision, "cpu_bf16_unit", lambda: unit)
    keys = _keys(ResultStore(tmp_path / "results", data_dir=tmp_path / "data"))
    assert keys["auto"] == keys["bf16" if unit else "no"] and keys["fp16"] == keys["no"] != keys["bf16"]
    # a store whose runs train on a GPU (a SLURM submitter's GPU jobs): auto is bf16 there, fp16 is fp16; and pad_to
    # auto pads every batch to one shape there (cse_kit.train.step), so a GPU's run is not a CPU's of its precision
    gpu = _keys(ResultStore(tmp_path / "results", data_dir=tmp_path / "data", cuda=True))
    assert gpu["auto"] == gpu["bf16"] != keys["bf16"] and len({gpu["no"], gpu["bf16"], gpu["fp16"]}) == 3


@pytest.mark.parametrize("submitter, worker", [("AMX-BF16", None), (None, "AVX512-BF16")])
def test_a_slurm_cpu_job_trains_in_the_precision_its_submitter_keyed(monkeypatch, tmp_path, submitter, worker):
    """A SLURM worker on another CPU than its submitter's is sent auto resolved by the submitter, and so computes the
    submitter's key and trains in the precision it says."""
    from cse_kit.results import parallel

    cfg = build_config("simcse-bert", "cpu")
    monkeypatch.setattr(precision, "cpu_bf16_unit", lambda: submitter)
    store = ResultStore(tmp_path / "results", data_dir=tmp_path / "data", cuda=parallel.jobs_get_gpus("cpu", "slurm"))
    sent = parallel.for_workers(cfg, "slurm")
    assert sent.mixed_precision == ("bf16" if submitter else "no") and parallel.for_workers(cfg, "local") is cfg
    planned = store.key(sent)
    monkeypatch.setattr(precision, "cpu_bf16_unit", lambda: worker)
    assert ResultStore(tmp_path / "results", data_dir=tmp_path / "data").key(sent) == planned
    assert precision.resolve_precision(sent.mixed_precision) == sent.mixed_precision  # what it trains in


def test_a_slurm_gpu_job_from_a_cpu_node_computes_its_submitters_key(monkeypatch, tmp_path):
    """The paper profile's SLURM jobs get GPUs: a submitter without one keys their runs as a GPU trains them (auto:
    bf16; an official variant's fp16: fp16), and the GPU worker computes the same key; the submitter refuses to
    train such a run itself (in fp32) when the workers did not finish it."""
    from cse_kit.results import parallel

    store = ResultStore(tmp_path / "results", data_dir=tmp_path / "data", cuda=parallel.jobs_get_gpus("paper", "slurm"))
    sent = {s: parallel.for_workers(build_config("simcse-bert", "paper", {"mixed_precision": s}), "slurm")
            for s in ("auto", "fp16")}
    assert {s: c.mixed_precision for s, c in sent.items()} == {"auto": "bf16", "fp16": "fp16"}
    planned = {s: store.key(c) for s, c in sent.items()}
    with pytest.raises(RuntimeError, match="keyed to train in fp16 on a GPU job.*SLURM workers did not finish it"):
        store.get(sent["fp16"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    worker = ResultStore(tmp_path / "results", data_dir=tmp_path / "data")
    assert {s: worker.key(c) for s, c in sent.items()} == planned


@needs_bf16_unit
def test_a_bf16_run_on_this_cpu_names_its_unit_in_the_header_and_the_record(data_dir, tmp_path):
    lines = []
    cfg = build_config("simcse-bert", "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir),
                                                "mixed_precision": "bf16", "max_steps": 2})
    summary = train(cfg, progress=False, announce=lines.append)
    assert f", batch 16, bf16 autocast on {cpu_bf16_unit()}; fresh; " in lines[0]
    assert summary["mixed_precision"] == "bf16" and summary["environment"]["cpu_bf16"] == cpu_bf16_unit()
    assert json.loads((tmp_path / "run" / "environment.json").read_text())["cpu_bf16"] == cpu_bf16_unit()
    assert np.isfinite(summary["best"])


def test_an_fp32_run_says_so_in_its_header(data_dir, tmp_path):
    lines = []
    cfg = build_config("simcse-bert", "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir),
                                                "max_steps": 1})
    summary = train(cfg, progress=False, announce=lines.append)
    assert ", batch 16, fp32; fresh; " in lines[0] and summary["mixed_precision"] == "no"


def _sts_b_dev_sentences(data_dir, n=64):
    from cse_kit.data import load_sts

    pairs = load_sts("STSBenchmark", "dev", data_dir)[:n]
    return [p.sent1 for p in pairs] + [p.sent2 for p in pairs]


@needs_bf16_unit
def test_amp_encodes_in_bf16_on_this_cpu_close_to_fp32(minilm, data_dir):
    from cse_kit.eval.encode import Encoder

    tokenizer, model = minilm
    sentences = _sts_b_dev_sentences(data_dir)
    exact = Encoder(model, tokenizer, "avg", device="cpu", progress=False).encode(sentences)
    fast = Encoder(model, tokenizer, "avg", device="cpu", amp=True, progress=False)
    assert fast.amp
    approx = fast.encode(sentences)
    cosine = (exact * approx).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(approx, axis=1)
    assert not np.array_equal(exact, approx)  # bf16 did run
    assert cosine.min() > 1 - BFLOAT16  # a sentence vector's direction within bfloat16's tolerance


def test_amp_on_a_cpu_without_a_bf16_unit_stays_fp32_and_is_recorded_off(minilm, data_dir, monkeypatch):
    from cse_kit.eval import encode

    monkeypatch.setattr(encode, "cpu_bf16_unit", lambda: None)
    tokenizer, model = minilm
    sentences = _sts_b_dev_sentences(data_dir, 8)
    asked = encode.Encoder(model, tokenizer, "avg", device="cpu", amp=True, progress=False)
    assert not asked.amp
    exact = encode.Encoder(model, tokenizer, "avg", device="cpu", progress=False).encode(sentences)
    assert np.array_equal(asked.encode(sentences), exact)


def test_eval_amp_says_in_one_line_what_it_ran_in_and_the_result_records_it(data_dir, tmp_path, monkeypatch,
                                                                            capsys):
    """On a CPU without a bf16 unit `cse-kit eval --amp` says it encodes in fp32 (it once printed nothing); with
    one, that it runs bf16 autocast on that unit. The result names the precision either way."""
    import json

    from cse_kit import cli
    from cse_kit.eval import encode

    args = ["eval", "--model", "smoke-bert", "--pooler", "avg", "--tasks", "STSBenchmark", "--mode", "dev",
            "--data-dir", str(data_dir), "--amp", "--output", str(tmp_path / "out.json")]
    for unit, words, precision in ((None, "--amp: encoding in fp32, the papers' protocol: this CPU has no unit", "fp32"),
                                   ("AVX512-BF16", "--amp: encoding under bf16 autocast on this CPU's AVX512-BF16 unit",
                                    "bf16")):
        monkeypatch.setattr(encode, "cpu_bf16_unit", lambda: unit)
        assert cli.main(args) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--amp")]
        assert len(lines) == 1 and lines[0].startswith(words)
        assert json.loads((tmp_path / "out.json").read_text())["precision"] == precision


def _evaluated(tmp_path, data_dir, amp):
    from cse_kit.results import Pretrained

    return ResultStore(tmp_path / "results", data_dir, amp=amp).get(Pretrained("smoke-bert", "avg", "smoke"),
                                                                    ("sts_dev",))


def _spearmans(record):
    return {name: r["dev"]["spearman"] for name, r in record["metrics"]["sts_dev"].items() if name != "avg"}


def test_a_store_evaluating_under_amp_keys_its_records_apart_and_says_what_they_ran_in(data_dir, tmp_path,
                                                                                       monkeypatch):
    """$CSE_KIT_EVAL_AMP=1 (`cse-kit report --amp`, the notebooks' store): records of their own, never an fp32 one's
    key; on a CPU without a bf16 unit the record says it ran in fp32, and its numbers are the fp32 ones."""
    from cse_kit.eval import encode
    from cse_kit.experiments import AMP_NOTE, setup
    from cse_kit.report import NOTEBOOK_DIR, execution_key

    monkeypatch.setattr(encode, "cpu_bf16_unit", lambda: None)
    monkeypatch.setenv("CSE_KIT_EVAL_AMP", "1")
    notebook = setup("smoke", [1], str(data_dir), str(tmp_path / "results"))
    assert notebook.store.amp and AMP_NOTE in notebook.describe()
    exact, asked = _evaluated(tmp_path, data_dir, False), _evaluated(tmp_path, data_dir, None)
    assert asked["key"] != exact["key"] and asked["evaluation_amp"] and "evaluation_amp" not in exact
    assert asked["evaluation_precision"] == "fp32" and _spearmans(asked) == _spearmans(exact)
    source = NOTEBOOK_DIR / "table8_lambda.ipynb"
    with_amp = execution_key(source, {"profile": "smoke"})
    monkeypatch.setenv("CSE_KIT_EVAL_AMP", "0")
    assert execution_key(source, {"profile": "smoke"}) != with_amp  # the report never reuses the other's notebook
    assert not ResultStore(tmp_path / "results", data_dir).amp
    monkeypatch.setenv("CSE_KIT_EVAL_AMP", "yes")
    with pytest.raises(ValueError, match="CSE_KIT_EVAL_AMP must be 1"):
        ResultStore(tmp_path / "results", data_dir)


@needs_bf16_unit
def test_a_store_evaluating_under_amp_on_this_cpu_runs_bf16_close_to_fp32(data_dir, tmp_path):
    exact, fast = _evaluated(tmp_path, data_dir, False), _evaluated(tmp_path, data_dir, True)
    assert fast["evaluation_precision"] == "bf16" and fast["key"] != exact["key"]
    shift = {name: abs(fast_value - _spearmans(exact)[name]) for name, fast_value in _spearmans(fast).items()}
    assert 0 < max(shift.values()) < 0.5, shift  # bf16 did run; the Spearmans move by far less than a point


def test_a_bf16_run_on_a_cpu_steps_a_fused_adamw_and_resumes_bit_exactly(data_dir, tmp_path, monkeypatch):
    """bf16 runs on a CPU update their weights with the fused AdamW (fp32 runs keep _foreach, bit-identical to
    torch's loop: optim.fused_update); it is deterministic, so a run stopped after step 1 resumes to the same weights
    and log as one never stopped. bf16 is emulated on a CPU without a unit: the tiny model's run is seconds anyway."""
    import signal

    from safetensors.torch import load_file

    from cse_kit.train import setup as run_setup
    from cse_kit.train.loop import TrainingStopped
    from cse_kit.train.preemption import stop_after_this_step

    fused = []
    real = run_setup.build_optimizer
    monkeypatch.setattr(run_setup, "build_optimizer", lambda *a: fused.append(a[-1]) or real(*a))

    def config(run, precision="bf16"):
        return build_config("simcse-bert", "smoke", {"output_dir": str(run), "data_dir": str(data_dir),
                                                     "mixed_precision": precision, "max_steps": 3, "eval_steps": 3,
                                                     "log_steps": 1, "save_steps": 100})

    train(config(tmp_path / "whole"), progress=False)
    stop_after_this_step(signal.SIGTERM)
    with pytest.raises(TrainingStopped):
        train(config(tmp_path / "stopped"), progress=False)
    train(config(tmp_path / "stopped"), progress=False)
    train(config(tmp_path / "fp32", "no"), progress=False)
    assert fused == [True, True, True, False]
    whole, resumed = (load_file(str(tmp_path / d / "model" / "model.safetensors")) for d in ("whole", "stopped"))
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    logs = [[{k: v for k, v in json.loads(x).items() if k != "dev"} for x in (tmp_path / d / "log.jsonl")
             .read_text().splitlines()] for d in ("whole", "stopped")]
    assert logs[0] == logs[1]
