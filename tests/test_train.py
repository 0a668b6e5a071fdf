"""The training engine on the smoke profile: every preset runs, resume after kill -9, 2 vs 1 process, export."""

import json
from pathlib import Path
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from cse_kit.results import record_key
from cse_kit.train import PRESETS, NonFiniteLoss, ProfileUnavailable, build_config, train

import kit_process
from conftest import cli_env, kill_9_before_checkpoint


def _cfg(data_dir, tmp_path, preset="diffcse-bert-sts", **changes):
    return build_config(preset, "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir), **changes})


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="the peak is reset on Linux only")
def test_a_runs_peak_memory_is_its_own_not_what_the_process_held_before(data_dir, tmp_path):
    """Table 4 (DiffAug) compares runs trained one after another in one notebook kernel: each reports its own peak."""
    held = np.ones(2_000_000_000 // 8)  # 2 GB resident before the run, freed when it starts
    before = held.nbytes
    del held
    summary = train(_cfg(data_dir, tmp_path, "simcse-bert", max_steps=2), progress=False)
    rss_now = int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                       if line.startswith("VmRSS:")).split()[1]) * 1024
    assert summary["peak_rss_bytes"] < rss_now + before / 2


# DiffAug's and PromptBERT's presets (prompt poolers) and ConSERT's (avg_top2) train in tests/test_diffaug.py,
# tests/test_promptbert.py and tests/test_consert.py
@pytest.mark.parametrize("preset", [p for p, (_, s) in PRESETS.items()
                                    if s["method"] not in ("diffaug", "promptbert", "consert")])
def test_every_preset_runs_on_the_smoke_profile(preset, data_dir, tmp_path):
    summary = train(_cfg(data_dir, tmp_path, preset), progress=False)
    run = tmp_path / "run"
    assert summary["steps"] == 8 and summary["best_step"] == 8
    assert 0 < summary["best"] <= 100
    peak_gpu = summary["peak_gpu_memory_bytes"]  # measured on CUDA only
    assert summary["peak_rss_bytes"] > 0 and (peak_gpu > 0 if torch.cuda.is_available() else peak_gpu is None)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert len(losses) == 4 and all(np.isfinite(losses))
    if PRESETS[preset][1]["method"] == "diffcse":
        assert all(0 <= r["rtd_accuracy"] <= 1 for r in log if "loss" in r)
    if PRESETS[preset][1]["method"] == "scd":
        assert all(-1 <= r["cosine"] <= 1 and r["decorrelation"] >= 0 for r in log if "loss" in r)
    meta = json.loads((run / "model" / "cse_kit.json").read_text())
    # supervised SimCSE exports its MLP as BERT's pooler (keep_projector), read with `cls`
    pooler = "cls" if PRESETS[preset][1].get("keep_projector") else "cls_before_pooler"
    assert meta["method"] == PRESETS[preset][1]["method"] and meta["pooler"] == pooler
    assert meta["profile"] == "smoke" and meta["preset"] == preset
    assert train(_cfg(data_dir, tmp_path, preset), progress=False) == summary  # finished: returned, not retrained


def test_presets_carry_the_papers_hyperparameters():
    cfg = build_config("diffcse-bert-sts", "paper")
    assert (cfg.lr, cfg.batch_size, cfg.mask_ratio, cfg.lam, cfg.epochs, cfg.projector, cfg.temp) == \
        (7e-6, 64, 0.30, 0.005, 2, "batchnorm", 0.05)
    assert (cfg.model, cfg.generator, cfg.max_seq_length, cfg.eval_steps) == \
        ("bert-base-uncased", "distilbert-base-uncased", 32, 125)
    cfg = build_config("diffcse-roberta-transfer", "paper")  # the checkpoint: STS-B dev, as run_diffcse.sh:17
    assert (cfg.lr, cfg.batch_size, cfg.mask_ratio, cfg.lam, cfg.metric, cfg.generator) == \
        (3e-6, 128, 0.15, 0.05, "stsb_spearman", "distilroberta-base")
    before = build_config("diffcse-bert-transfer", "cpu", ["metric=transfer_devacc"])  # the former selection, named
    assert before.metric == "transfer_devacc"  # its records stay apart: the results store's key holds the metric
    assert record_key(before) != record_key(before.replace(metric="stsb_spearman"))
    assert build_config("diffcse-bert-sts", "paper", ["generator=bert-mini"]).generator == \
        "google/bert_uncased_L-4_H-256_A-4"
    with pytest.raises(ProfileUnavailable, match="RoBERTa"):
        build_config("simcse-roberta", "cpu")
    with pytest.raises(ValueError, match="mask_ratio"):
        build_config("diffcse-bert-sts", "cpu", ["mask_ratio=1.5"])
    with pytest.raises(ValueError, match="key=value"):
        build_config("diffcse-bert-sts", "cpu", ["lamda=0.1"])


def _cli(args, **kw):
    return kit_process.popen(args, env=cli_env(), text=True,
                             **{"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, **kw})


def _weights(model_dir):
    return load_file(str(model_dir / "model.safetensors"))


def test_resume_after_kill_9_ends_like_an_uninterrupted_run(data_dir, tmp_path):
    args = ["train", "--preset", "diffcse-bert-sts", "--profile", "smoke", "--data-dir", str(data_dir),
            "--no-progress", "--set", "max_examples=256", "--set", "save_steps=2", "--set", "eval_steps=6"]
    whole = tmp_path / "whole"
    assert _cli(args + ["--output-dir", str(whole)]).wait() == 0
    cut = tmp_path / "cut"
    kill_9_before_checkpoint(args + ["--output-dir", str(cut)], 6)  # step 6 evaluated, its best model exported
    assert not (cut / "summary.json").exists()
    resumed = _cli(args + ["--output-dir", str(cut)], stdout=subprocess.PIPE)
    out, _ = resumed.communicate()
    assert resumed.returncode == 0
    header = out.splitlines()[0]  # the run's first line says what trains and that it resumes
    assert header.startswith("diffcse (diffcse-bert-sts, smoke profile): smoke-bert on Wiki1M-sample (256 examples), ")
    assert "resuming at step" in header and str(cut) in header
    a, b = (json.loads((d / "summary.json").read_text()) for d in (whole, cut))
    assert (a["best"], a["best_step"], a["steps"]) == (b["best"], b["best_step"], b["steps"])
    log_a, log_b = ((d / "log.jsonl").read_text().splitlines() for d in (whole, cut))
    strip = lambda lines: [{k: v for k, v in json.loads(x).items() if k != "dev"} for x in lines]  # noqa: E731
    assert strip(log_a) == strip(log_b)  # the same losses at every step, no step logged twice
    wa, wb = _weights(whole / "model"), _weights(cut / "model")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.slow  # the BatchNorm test below compares the same two gloo processes with one, and more
def test_two_processes_compute_the_one_process_loss(data_dir, tmp_path):
    (_, two), losses = _one_and_two_processes(data_dir, tmp_path, _two_process_settings(), 29517)
    assert two["processes"] == 2
    assert len(losses[0]) == 4
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)  # step 2+ also checks the gradients agree


def _two_process_settings(extra=()):
    return ["--set", "dropout=0", "--set", "pooler=avg", "--set", "lr=1e-3", "--set", "log_steps=1",
            "--set", "max_steps=4", "--set", "eval_steps=100", *extra]


def _one_and_two_processes(data_dir, tmp_path, settings, port):
    base = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir", str(data_dir), "--no-progress",
            *settings]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    kit_process.run([*base, "--output-dir", str(one)], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                    str(port), "-m", "cse_kit.cli", *base, "--output-dir", str(two)], env=env, check=True,
                   capture_output=True)
    summaries = [json.loads((d / "summary.json").read_text()) for d in (one, two)]
    losses = [[json.loads(x)["loss"] for x in (d / "log.jsonl").read_text().splitlines() if '"loss"' in x]
              for d in (one, two)]
    return summaries, losses


def test_batchnorm_statistics_are_those_of_the_global_batch_under_two_processes(data_dir, tmp_path):
    """DiffCSE's BatchNorm projector: 2 gloo processes, each holding half the rows, train what 1 process trains."""
    (one, two), losses = _one_and_two_processes(data_dir, tmp_path, _two_process_settings(
        ["--set", "projector=batchnorm", "--set", "temp=1"]), 29518)
    assert two["processes"] == 2
    assert two["seeds"][0] == one["seeds"][0] == 42 and len(set(two["seeds"])) == 2  # each rank its own seed
    assert len(losses[0]) == 4
    # temp=1 keeps the loss near 1.85, away from float32 noise (at 0.05 it is ~1e-5); they agree to 1e-7 here, where
    # each process's own statistics (batchnorm-per-process) differ by 2.5e-3
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    # the curves go to TensorBoard (the default) from the first process only: one event file, each step once
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = (tmp_path / "two").glob("*/events.out.tfevents.*")
    curves = EventAccumulator(str(events.parent))
    curves.Reload()
    assert [e.step for e in curves.Scalars("train/loss")] == [1, 2, 3, 4]


def test_too_small_a_temperature_is_refused(data_dir, tmp_path):
    with pytest.raises(ValueError, match="temp must be >= 0.001"):
        _cfg(data_dir, tmp_path, "simcse-bert", temp=1e-45)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU's fallback")
def test_fp16_on_a_cpu_trains_in_fp32_and_the_header_says_so(data_dir, tmp_path, capsys):
    """The official runs' fp16 (DiffCSE's here, as its presets ask on the paper profile): Accelerate has no fp16 on a
    CPU, so the run trains in fp32, the header says why, and the summary records it."""
    summary = train(_cfg(data_dir, tmp_path, max_steps=1, eval_steps=100, mixed_precision="fp16"), progress=False)
    header = capsys.readouterr().out.splitlines()[0]
    assert "batch 16, fp32 (fp16 asked; Accelerate runs fp16 on accelerators only" in header
    assert "the official scripts train in fp16 (voidism/DiffCSE run_diffcse.sh:30 --fp16); fresh;" in header
    assert summary["mixed_precision"] == "no" and summary["config"]["mixed_precision"] == "fp16"


@pytest.mark.parametrize("caught_at", ["dev evaluation", "checkpoint"])
def test_non_finite_weights_are_never_saved_and_the_message_names_the_last_good_checkpoint(
        data_dir, tmp_path, monkeypatch, caught_at):
    """The optimizer step of step 3 blows a weight to inf (as an lr far too high does)."""
    real_step, steps = torch.optim.AdamW.step, []

    def blowing_step(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        steps.append(1)
        if len(steps) == 3:
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("inf"))
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", blowing_step)
    eval_steps = 1 if caught_at == "dev evaluation" else 2
    cfg = _cfg(data_dir, tmp_path, "simcse-bert", eval_steps=eval_steps, save_steps=1)
    with pytest.raises(NonFiniteLoss, match=r"at step 3; .*nothing of this step was saved. The last good checkpoint "
                                            r"is .*checkpoint \(step 2\)") as stopped:
        train(cfg, progress=False)
    assert "Lower lr, then start" in str(stopped.value)  # an fp32 CPU run is not told to move from fp16 to bf16
    run = tmp_path / "run"
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"] == 2
    for weights in (_weights(run / "model"), load_file(str(run / "checkpoint" / "model.safetensors"))):
        assert all(bool(torch.isfinite(w).all()) for w in weights.values())
    assert not (run / "summary.json").exists()


def test_a_nan_dev_score_is_never_better():
    from cse_kit.train.loop import _is_better

    assert not _is_better(float("nan"), None) and not _is_better(float("inf"), 1.0) and _is_better(2.0, 1.0)


@pytest.fixture(scope="module")
def half_run(data_dir, tmp_path_factory):
    """A finished 4-step smoke run (checkpoint at step 4) to damage or resume in copies."""
    run = tmp_path_factory.mktemp("half") / "run"
    cfg = build_config("simcse-bert", "smoke", {"output_dir": str(run), "data_dir": str(data_dir), "max_steps": 4,
                                                "eval_steps": 4, "save_steps": 2, "log_steps": 1,
                                                "keep_checkpoint": True})
    train(cfg, progress=False)
    return cfg


def _copy(half_run, tmp_path, **changes):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(half_run.output_dir, run)
    (run / "summary.json").unlink()  # as if killed after its last checkpoint
    return half_run.replace(output_dir=str(run), **changes), run


def test_a_torn_last_log_line_is_dropped_on_resume(half_run, tmp_path):
    cfg, run = _copy(half_run, tmp_path)
    with (run / "log.jsonl").open("a") as f:
        f.write('{"step": 5, "lr": 0.0001, "lo')  # killed in the middle of a write
    train(cfg, progress=False)
    assert [json.loads(x)["step"] for x in (run / "log.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 4]


@pytest.mark.parametrize("damage,named", [
    ("trainer_state.json", "checkpoint/trainer_state.json is damaged"),
    ("model.safetensors", "checkpoint/model.safetensors is damaged"),
    ("log.jsonl", r"log.jsonl:2 is damaged"),
])
def test_damaged_run_files_are_named_with_the_fix(half_run, tmp_path, damage, named):
    from cse_kit.train.loop import RunStateError

    cfg, run = _copy(half_run, tmp_path)
    path = run / "log.jsonl" if damage == "log.jsonl" else run / "checkpoint" / damage
    body = path.read_bytes()
    path.write_bytes(body.replace(b"\n", b"\n#", 1) if damage == "log.jsonl" else body[:len(body) // 2])
    with pytest.raises(RunStateError, match=named + ".*(remove .*checkpoint to train this run again|remove that line)"):
        train(cfg, progress=False)


def test_resume_with_another_configuration_is_refused_or_applied_and_recorded(half_run, tmp_path):
    cfg, run = _copy(half_run, tmp_path, lr=3e-4, max_steps=8)
    with pytest.raises(ValueError, match=r"lr 0.0001 -> 0.0003, max_steps 4 -> 8.*--resume-with-changes"):
        train(cfg, progress=False)
    summary = train(cfg, progress=False, resume_with_changes=True)
    assert summary["resumed_with_changes"] == [{"step": 4, "changes": {"lr": [1e-4, 3e-4], "max_steps": [4, 8]}}]
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "lr" in r}
    assert lrs[6] == pytest.approx(3e-4 * (8 - 6) / 8)  # the new lr on the new schedule, not the checkpoint's


def test_exported_model_loads_as_plain_hf_and_as_sentence_transformers(data_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from cse_kit.eval import Encoder
    from cse_kit.train import export_sentence_transformers

    train(_cfg(data_dir, tmp_path, "simcse-bert"), progress=False)
    model_dir = tmp_path / "run" / "model"
    model, tok = AutoModel.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    sentences = ["a man is playing a guitar .", "two dogs run in the snow", "the stock market fell"]
    ours = Encoder(model, tok, "cls_before_pooler", progress=False, device="cpu").encode(sentences)
    st = pytest.importorskip("sentence_transformers")
    st_dir = export_sentence_transformers(model_dir, tmp_path / "st")
    theirs = st.SentenceTransformer(str(st_dir), device="cpu").encode(sentences)
    assert np.allclose(ours, theirs, atol=1e-5)


FREED_BUT_HELD = """
import ctypes, sys, torch
from cse_kit.environment import keep_freed_memory

libc = ctypes.CDLL(None)
size = ctypes.c_size_t if hasattr(libc, "mallinfo2") else ctypes.c_int  # mallinfo2 from glibc 2.33, mallinfo before

class MallInfo(ctypes.Structure):
    _fields_ = [(name, size) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                          "uordblks", "fordblks", "keepcost")]

mallinfo = getattr(libc, "mallinfo2", libc.mallinfo)
mallinfo.restype = MallInfo
if sys.argv[1] == "keep":
    assert keep_freed_memory()
blocks = [torch.ones(24 << 18) for _ in range(6)]  # six 24 MB tensors, as a training step's activations
del blocks
print(mallinfo().fordblks >> 20)  # MB that malloc holds free for the next step
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_keep_freed_memory_keeps_freed_large_blocks_in_the_process_for_the_next_step():
    """What keep_freed_memory changes, decided by malloc's thresholds alone: 24 MB blocks come from the heap and stay
    there once freed, where glibc's default maps each afresh and returns it. The page faults that this saves depend
    on the heap's layout and the machine's load: bench/malloc_faults.py prints them."""
    held = {setting: int(subprocess.run([sys.executable, "-c", FREED_BUT_HELD, setting], capture_output=True,
                                        text=True, check=True).stdout) for setting in ("default", "keep")}
    assert held["keep"] >= 144 and held["default"] < 24, held


@pytest.mark.parametrize("how", ["flags", "config"])
def test_accelerate_launch_on_cpu_says_it_started_one_process_and_names_torchrun(data_dir, tmp_path, how):
    """accelerate's CPU launcher starts one process whatever --num_processes says (without mpirun)."""
    config = tmp_path / "multi_cpu.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 2\n"
                      "num_machines: 1\nuse_cpu: true\nmixed_precision: 'no'\n")
    launch = ["--cpu", "--num_processes", "2"] if how == "flags" else ["--config_file", str(config)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", *launch, "-m", "cse_kit.cli", "train",
                           "--preset", "simcse-bert", "--profile", "smoke", "--data-dir", str(data_dir),
                           "--output-dir", str(tmp_path / "run")], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "asked for 2 CPU processes but started 1" in done.stderr
    assert "torchrun --nproc_per_node 2 -m cse_kit.cli train" in done.stderr
    assert not (tmp_path / "run").exists()


def test_checkpoints_follow_the_clock_and_a_finished_run_keeps_only_its_best_model(data_dir, tmp_path, monkeypatch):
    import cse_kit.train.loop as loop

    saved = []
    real_swap = loop.swap_dir
    monkeypatch.setattr(loop, "swap_dir", lambda tmp, dest: (saved.append(json.loads(
        (tmp / "trainer_state.json").read_text())["step"]), real_swap(tmp, dest))[1])
    cfg = _cfg(data_dir, tmp_path, "simcse-bert", max_steps=6, eval_steps=3, log_steps=1,
               checkpoint_minutes=1e-9)  # any time at all is past due: a checkpoint at every log step but the last
    train(cfg, progress=False)
    assert saved == [1, 2, 3, 4, 5]
    assert not (tmp_path / "run" / "checkpoint").exists() and (tmp_path / "run" / "model" / "config.json").is_file()
    saved.clear()
    cfg = _cfg(data_dir, tmp_path / "b", "simcse-bert", max_steps=6, eval_steps=3, log_steps=1, keep_checkpoint=True)
    train(cfg, progress=False)  # 20 minutes never pass here: only the final state, kept on request
    assert saved == [6] and (tmp_path / "b" / "run" / "checkpoint" / "trainer_state.json").is_file()


def test_a_run_without_its_bar_says_its_step_and_the_time_left_after_its_first_step_then_on_the_clock(
        data_dir, tmp_path, monkeypatch):
    """What a notebook's kernel shows on the terminal while a run trains (no progress bar there)."""
    import cse_kit.train.loop as loop

    lines = []
    monkeypatch.setattr(loop, "STATUS_SECONDS", 1e9)
    train(_cfg(data_dir, tmp_path, "simcse-bert", max_steps=4, eval_steps=4), progress=False, status=lines.append)
    assert len(lines) == 1 and re.fullmatch(r"step 1/4, about \d+ s left", lines[0]), lines
    monkeypatch.setattr(loop, "STATUS_SECONDS", 0.0)
    lines.clear()
    train(_cfg(data_dir, tmp_path / "b", "simcse-bert", max_steps=4, eval_steps=4), progress=False, status=lines.append)
    assert [line.split(",")[0] for line in lines] == ["step 1/4", "step 2/4", "step 3/4"]  # the last: the run's end


def test_a_non_finite_loss_read_at_the_next_log_step_names_the_step_it_happened(data_dir, tmp_path, monkeypatch):
    from cse_kit.methods.simcse import SimCSE

    real_forward, calls = SimCSE.forward, []

    def nan_at_step_2(self, batch):
        out = real_forward(self, batch)
        calls.append(1)
        return {**out, "loss": out["loss"] * float("nan")} if len(calls) == 2 else out

    monkeypatch.setattr(SimCSE, "forward", nan_at_step_2)
    cfg = _cfg(data_dir, tmp_path, "simcse-bert", max_steps=8, eval_steps=8, log_steps=4, save_steps=8)
    with pytest.raises(NonFiniteLoss, match=r"the loss is not finite \(nan or inf\) at step 2; .*No checkpoint"):
        train(cfg, progress=False)
    assert len(calls) == 4  # found at the log step, without a host sync on every step


@pytest.mark.slow
def test_a_compiled_encoder_trains_the_same_steps_and_exports_a_plain_model(data_dir, tmp_path):
    """Without dropout: compiled code draws its dropout masks from another generator than eager code, so only
    dropout-free steps can be compared number for number."""
    settings = {"max_steps": 3, "eval_steps": 3, "log_steps": 1, "dropout": 0.0}
    eager = train(_cfg(data_dir, tmp_path / "eager", "simcse-bert", **settings), progress=False)
    compiled = train(_cfg(data_dir, tmp_path / "compiled", "simcse-bert", compile=True, **settings), progress=False)
    losses = [[json.loads(x)["loss"] for x in (tmp_path / d / "run" / "log.jsonl").read_text().splitlines()
               if "loss" in x] for d in ("eager", "compiled")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4) and len(losses[0]) == 3
    assert compiled["best"] == pytest.approx(eager["best"], abs=0.05)
    assert set(_weights(tmp_path / "compiled" / "run" / "model")) == set(_weights(tmp_path / "eager" / "run" / "model"))


VARIANTS = [{"contrastive": False}, {"target": "next"}, {"target": "same+next"}, {"task": "cmlm"},
            {"task": "cmlm", "target": "next"}, {"task": "cmlm", "target": "same+next"}, {"task": "corrective"},
            {"edit": "insert"}, {"edit": "delete"}, {"edit": "all"}, {"variant": "paper-text"},
            *({"task": role, "edit": edit} for role in ("positive", "negative") for edit in ("replace", "insert", "delete"))]


@pytest.mark.parametrize("changes", VARIANTS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_every_diffcse_ablation_runs_on_the_smoke_profile(changes, data_dir, tmp_path):
    """Tables 3, 4 and 15: each variant trains a few steps; the next-sentence ones on the ordered corpus."""
    cfg = _cfg(data_dir, tmp_path, max_steps=2, eval_steps=2, log_steps=1, **changes)
    assert cfg.data == ("Licenses-ordered" if changes.get("target", "same") != "same" else "Wiki1M-sample")
    summary = train(cfg, progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r for r in log if "loss" in r]
    assert summary["steps"] == 2 and len(losses) == 2 and all(np.isfinite(r["loss"]) for r in losses)
    task = changes.get("task", "rtd")
    if task in ("rtd", "cmlm", "corrective"):
        assert all(task in r and ("contrastive" in r) == changes.get("contrastive", True) for r in losses)


def test_supervised_simcse_exports_its_mlp_as_the_pooler(data_dir, tmp_path):
    """keep_projector: the exported model's pooler layer is the trained MLP, cse_kit.json says pooler cls."""
    from cse_kit.models import load_model

    cfg = _cfg(data_dir, tmp_path, "simcse-bert", max_steps=2, eval_steps=2, keep_projector=True,
               keep_checkpoint=True)
    train(cfg, progress=False)
    meta = json.loads((tmp_path / "run" / "model" / "cse_kit.json").read_text())
    assert meta["pooler"] == "cls"
    _, model = load_model(str(tmp_path / "run" / "model"))
    checkpoint = load_file(tmp_path / "run" / "checkpoint" / "model.safetensors")
    assert torch.equal(model.pooler.dense.weight, checkpoint["projector.0.weight"])
