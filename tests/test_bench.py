"""The benchmarks' paper-shape modes on CPU (issue 26): `bench/train_speed.py --shape` and `bench/eval_speed.py full`
run here with a few steps and small batches, so the code path a GPU measurement takes cannot rot. They time the
loop's own step (cse_kit.train.step.TrainStep), and `bench/gpu_check.sh --device cpu` runs the GPU node check's
every part on a tiny BERT (issue 75)."""

import functools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cse_kit.train.precision import resolve_precision

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import paper_speed  # noqa: E402
import speed_report  # noqa: E402

import forked_python

ALL_METHODS = ("simcse", "diffcse", "scd", "esimcse", "diffaug", "promptbert", "consert")


def run_bench(script: str, *args: str, data_dir) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([*forked_python.command(), str(BENCH / script), *args, "--data-dir", str(data_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def check_train_table(stdout: str, result: dict, methods) -> None:
    """Every requested method has a row with a finite ms/step and a projected full-run time, in the table and in
    the JSON."""
    names = [paper_speed.NAMES[m] for m in methods]
    assert [r["method"] for r in result["results"]] == names
    for r in result["results"]:
        row = re.compile(rf"{re.escape(r['method'])}\s+{re.escape(r['preset'])}\s")
        line = next((x for x in stdout.splitlines() if row.match(x)), None)
        assert line is not None, f"no row for {r['method']} in\n{stdout}"
        fields = line.split()
        ms_step = float(fields[4])
        assert math.isfinite(ms_step) and ms_step > 0, line
        assert re.search(r"\d+\.\d (h|min)$", line), line  # the projected full run
    for r in result["results"]:
        assert math.isfinite(r["ms_step"]) and r["ms_step"] > 0
        assert r["tflop_step"] > 0 and r["peak_fraction"] > 0  # of the precision's matmul ceiling measured in the run
        projection = r["projection"]
        assert math.isfinite(projection["total_s"]) and projection["total_s"] > 0
        assert set(projection["parts_s"]) == {"data", "step", "dev evaluation", "checkpoint"}
        assert projection["steps"] == 1_000_000 // r["batch_size"] * (2 if r["method"] == "DiffCSE" else 1)
    if "diffaug" in methods:
        diffaug = next(r for r in result["results"] if r["method"] == "DiffAug")
        assert diffaug["projection"]["stage1_steps"] == 2000 and "DiffAug stage 1" in stdout


def test_train_speed_bert_base_shape_on_cpu(data_dir, tmp_path):
    out = tmp_path / "speed.json"
    stdout = run_bench("train_speed.py", "--shape", "bert-base", "--device", "cpu", "--methods", "simcse",
                       "--steps", "3", "--warmup", "1", "--batch-size", "2", "--dev-pairs", "8",
                       "--output", str(out), data_dir=data_dir)
    result = json.loads(out.read_text())
    check_train_table(stdout, result, ["simcse"])
    simcse = result["results"][0]
    # the paper preset's mixed_precision=auto as this CPU resolves it: bf16 where a unit multiplies bf16, else fp32
    assert simcse["preset"] == "simcse-bert" and simcse["batch_size"] == 2
    assert simcse["precision"] == resolve_precision("auto", cuda=False)
    # 6 x BERT-base's 85.45 M non-embedding weights x (2 rows x 2 views x width) positions, width <= 32
    width = simcse["main"]["flops"] / (6 * 4 * 85_450_752)
    assert 3 <= width <= 32
    assert simcse["dev"]["pairs"] == 8 and simcse["dev"]["of"] == 1500


@pytest.mark.slow
def test_train_speed_times_fp32_and_bf16_side_by_side(data_dir, tmp_path):
    out = tmp_path / "speed.json"
    stdout = run_bench("train_speed.py", "--shape", "bert-base", "--device", "cpu", "--methods", "simcse",
                       "--mixed-precision", "no,bf16", "--steps", "2", "--warmup", "1", "--batch-size", "2",
                       "--dev-pairs", "8", "--output", str(out), data_dir=data_dir)
    result = json.loads(out.read_text())
    assert [(r["method"], r["precision"]) for r in result["results"]] == [("SimCSE", "no"), ("SimCSE", "bf16")]
    assert set(result["peak_tflops"]) == {"no", "bf16"} and all(v > 0 for v in result["peak_tflops"].values())
    assert re.search(r"fp32 [\d.]+ TFLOP/s \(fp32 matmul ceiling.*bf16 [\d.]+ TFLOP/s \(bf16 matmul ceiling", stdout)
    assert re.search(r"SimCSE: bf16 [\d.]+ s/step vs fp32 [\d.]+ s/step: [\d.]+x as fast", stdout), stdout


@pytest.mark.slow
def test_train_speed_cpu_profile_times_every_method_in_fp32_and_bf16(data_dir):
    """The cpu profile's mode (all-MiniLM-L6-v2): every method in both precisions in the same rounds, PromptBERT's bf16
    step on its templated batches as its fp32 one, DiffCSE's additions timed on their own."""
    methods = ("SimCSE", "DiffCSE", "SCD", "ESimCSE", "PromptBERT", "ConSERT")
    stdout = run_bench("train_speed.py", "--methods", "simcse,diffcse,scd,esimcse,promptbert,consert",
                       "--mixed-precision", "no,bf16", "--steps", "1", "--batch-size", "8", data_dir=data_dir)
    for method in methods:
        for name in (method, f"{method} bf16"):
            assert re.search(rf"^  {name} +[\d.]+ sentences/s", stdout, re.M), f"no {name} line in\n{stdout}"
    assert re.search(r"SimCSE [\d.]+x, DiffCSE [\d.]+x, .*ConSERT [\d.]+x: bf16 step speed-up", stdout), stdout
    assert re.search(r"generator edit [\d.]+ s, discriminator fwd\+bwd [\d.]+ s", stdout), stdout


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["bert-base", "roberta-base"])
def test_train_speed_every_method(data_dir, tmp_path, shape):
    out = tmp_path / "speed.json"
    stdout = run_bench("train_speed.py", "--shape", shape, "--device", "cpu", "--steps", "3", "--warmup", "1",
                       "--batch-size", "2", "--dev-pairs", "8", "--output", str(out), data_dir=data_dir)
    check_train_table(stdout, json.loads(out.read_text()), ALL_METHODS)


@pytest.mark.slow
def test_train_speed_profiles_both_of_diffaugs_stages(data_dir):
    """`--profile` prints an operator table for the main step and, for a two-stage method, for its stage-1 step."""
    stdout = run_bench("train_speed.py", "--shape", "bert-base", "--device", "cpu", "--methods", "diffaug", "--steps",
                       "1", "--warmup", "1", "--batch-size", "2", "--dev-pairs", "8", "--profile", data_dir=data_dir)
    for step in ("DiffAug", "DiffAug stage-1"):
        assert re.search(rf"^profile of one {step} (fp32|bf16) step: matrix operators \d+% of", stdout, re.M), stdout
    assert stdout.count("aten::mm") >= 2


@pytest.mark.slow
def test_train_speed_compile_payoff(data_dir):
    stdout = run_bench("train_speed.py", "--shape", "bert-base", "--device", "cpu", "--methods", "simcse", "--steps",
                       "2", "--warmup", "1", "--batch-size", "2", "--dev-pairs", "8", "--compile", "--tf32",
                       data_dir=data_dir)
    assert re.search(r"compile SimCSE \(compile=true, not captured, pad longest\): [\d.]+ ms/step compiled vs "
                     r"[\d.]+ eager .* (pays off|does not pay off)", stdout), stdout
    assert "nothing to measure on CPU" in stdout


@pytest.mark.slow  # a benchmark script's own run: minutes of measuring, checked with -m slow
def test_eval_speed_full_on_cpu(data_dir):
    stdout = run_bench("eval_speed.py", "full", "--tasks", "STS16,CR", "--mode", "fasttest", data_dir=data_dir)
    seconds = {k: float(v) for k, v in re.findall(r"^  (encoding|STS scoring|transfer classifiers|total)\s+([\d.]+) s",
                                                  stdout, re.M)}
    assert set(seconds) == {"encoding", "STS scoring", "transfer classifiers", "total"}, stdout
    # the parts are printed to 0.1 s, so their sum may pass the printed total by that rounding
    assert seconds["encoding"] > 0 and seconds["total"] >= seconds["encoding"] + seconds["transfer classifiers"] - 0.15
    assert "(CR " in stdout and "distinct sentences" in stdout


@pytest.mark.slow  # a benchmark script's own run: minutes of measuring, checked with -m slow
def test_eval_speed_eta_compares_the_bars_projection_with_the_real_end(data_dir):
    stdout = run_bench("eval_speed.py", "eta", "--tasks", "STS16", "--limit", "1500", data_dir=data_dir)
    match = re.search(r"1500 distinct sentences, minilm, cpu: encoding took ([\d.]+) s; after the first 10% of the "
                      r"work the bar's projected total was off by a median ([\d.]+)%, at worst ([-+][\d.]+)%; (\d+)% "
                      r"of its (\d+) updates within 20%", stdout)
    assert match and float(match[1]) > 0 and int(match[5]) > 0, stdout


@pytest.mark.slow
def test_eval_speed_compares_fp32_with_amp(data_dir):
    from cse_kit.environment import cpu_bf16_unit

    stdout = run_bench("eval_speed.py", "full", "--tasks", "STS16", "--mode", "fasttest", "--device", "cpu", "--amp",
                       data_dir=data_dir)
    assert ", fp32" in stdout
    if cpu_bf16_unit() is None:  # the second run is fp32 too, and the script says why
        assert "has no bf16 unit" in stdout, stdout
        return
    assert ", bf16 autocast" in stdout
    assert re.search(r"matmul ceiling measured now \(2048³\): fp32 [\d.]+ TFLOP/s, bf16 [\d.]+", stdout), stdout
    assert re.search(r"bf16 autocast moved \d+ of \d+ numbers at 4 decimals, at most by 0\.\d+", stdout), stdout


@pytest.mark.slow
def test_eval_speed_full_bert_base_shape(data_dir):
    stdout = run_bench("eval_speed.py", "full", "--shape", "bert-base", "--device", "cpu", "--tasks", "STS16,CR",
                       "--mode", "fasttest", "--tf32", data_dir=data_dir)
    assert "bert-base shape (random weights)" in stdout and "transfer classifiers" in stdout


# --- the pieces, without a run --------------------------------------------------------------------------------------

def test_projection_counts_the_presets_steps_evaluations_and_checkpoints():
    from cse_kit.train import build_config

    cfg = build_config("diffaug-semi-bert", "paper")
    step = {"parts": {"data": 0.01, "step": 0.25}}
    p = paper_speed.project(cfg, step, step, dev_s=3.0, checkpoint_s=10.0)
    assert p["steps"] == 1_000_000 // 256 and p["stage1_steps"] == 2000
    total = p["steps"] + 2000
    assert p["evaluations"] == total // 50 + 1  # every 50 steps and at the end
    assert p["parts_s"]["step"] == pytest.approx(0.25 * total)
    assert p["parts_s"]["dev evaluation"] == pytest.approx(3.0 * p["evaluations"])
    before = sum(v for k, v in p["parts_s"].items() if k != "checkpoint")
    assert p["checkpoints"] == int(before // (60 * cfg.checkpoint_minutes))
    assert p["total_s"] == pytest.approx(before + 10.0 * p["checkpoints"])


@pytest.mark.parametrize("name, unit, peak", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4), ("NVIDIA H100 PCIe", "bf16", 756.5), ("NVIDIA H200", "tf32", 494.7),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0), ("NVIDIA A10", "bf16", 125.0), ("NVIDIA L4", "fp32", 30.3),
    ("Tesla V100-SXM2-32GB", "fp16", 125.0), ("Quadro RTX 8000", "bf16", None), ("Some New GPU", "bf16", None)])
def test_gpu_peaks_by_device_name(name, unit, peak):
    assert speed_report.gpu_peak(name, unit)[0] == peak


def test_a_cpus_peak_is_the_matmul_ceiling_of_the_precision_measured_now(monkeypatch):
    # a 256³ product, not the bench's 2048³: the same code measured, without the minutes a bf16 2048³ product takes on a
    # CPU with no bf16 unit (571 s on an AVX2-only AMD EPYC, loaded)
    monkeypatch.setattr(speed_report, "matmul_ceiling", functools.partial(speed_report.matmul_ceiling, n=256))
    fp32, note = speed_report.peak_tflops(torch.device("cpu"), "no", None)
    assert fp32 > 0 and note.startswith("fp32 matmul ceiling") and "measured in this run" in note
    assert speed_report.peak_tflops(torch.device("cpu"), "bf16", None)[1].startswith("bf16 matmul ceiling")
    assert speed_report.peak_tflops(torch.device("cpu"), "no", 1.5)[0] == 1.5


def test_flops_are_counted_per_transformer_pass():
    from cse_kit.train import build_config, build_objective
    from cse_kit.models import load_encoder

    cfg = build_config("simcse-bert", "smoke")
    objective = build_objective(cfg, *load_encoder(cfg.model))
    params = paper_speed.nonembedding_params(objective.encoder)
    batch = {"input_ids": torch.randint(1000, 2000, (3, 2, 7)), "attention_mask": torch.ones(3, 2, 7, dtype=torch.long)}
    with paper_speed.count_flops(objective) as flops:
        objective(batch)
        with torch.no_grad():
            objective.encoder(input_ids=batch["input_ids"][:, 0])
    assert flops == [6 * params * 3 * 2 * 7, 2 * params * 3 * 7]


def test_roberta_ids_are_random_with_bert_lengths_and_specials(minilm):
    tokenizer = minilm[0]
    texts = ["A short sentence.", "Another, somewhat longer sentence about nothing in particular at all."]
    plain = paper_speed.sentence_encoder(tokenizer, 32)(texts)
    assert plain == tokenizer(texts, truncation=True, max_length=32)["input_ids"]
    randomized = paper_speed.sentence_encoder(tokenizer, 32, random_vocab=50265)(texts)
    for bert, roberta in zip(plain, randomized):
        assert len(bert) == len(roberta)
        assert roberta[0] == tokenizer.cls_token_id and roberta[-1] == tokenizer.sep_token_id
        assert all(paper_speed.RANDOM_ID_START <= i < 50265 for i in roberta[1:-1])
    corpus = paper_speed.RepeatedCorpus([(t,) for t in texts], 1_000_000, paper_speed.sentence_encoder(tokenizer, 32))
    assert len(corpus) == 1_000_000 and corpus[[999_999]]["ids0"] == plain[1:]


@pytest.mark.slow  # a benchmark script's own run: minutes of measuring, checked with -m slow
def test_report_speed_times_a_report_and_sums_saved_consoles(data_dir, tmp_path):
    """The report's benchmark (issue 23): it runs `cse-kit report` into a fresh store, reads each notebook's outcome
    off the console and prints the wall time and CPU-seconds; `--logs` sums a report run in parts."""
    stdout = run_bench("report_speed.py", "--only", "table12_14_hparams", "--keep", str(tmp_path / "r"),
                       data_dir=data_dir)
    assert re.search(r"^  table12_14_hparams\s+ok\s+\d+ s$", stdout, re.M), stdout
    assert re.search(r"^wall \d+ min \d+ s \(\d+ s\), CPU [\d,]+ s \(user", stdout, re.M), stdout
    assert (tmp_path / "r" / "report" / "index.html").is_file()
    parts = [tmp_path / "a.log", tmp_path / "b.log"]
    parts[0].write_text("[1/2] table1_sts: running (1 notebook(s) after it)\n[1/2] table1_sts: failed (5 s) boom\n"
                        "[2/2] table8_lambda: ok (754 s)\n")
    parts[1].write_text("[1 of 1 finished] table1_sts: ok (623 s)\n    table1_sts: run 1/8: done in 59 s\n")
    summed = subprocess.run([sys.executable, str(BENCH / "report_speed.py"), "--logs", *map(str, parts)],
                            capture_output=True, text=True, check=True).stdout
    assert "2 notebooks, sum of their times 22 min 57 s; none failed" in summed, summed  # the rerun's outcome counts


def test_report_speed_passes_amp_and_its_choices_to_the_report(tmp_path, monkeypatch, capsys):
    """The benchmark runs `cse-kit report` with the options it was given (`--amp`: evaluation under AMP), into DIR."""
    import report_speed

    commands = []

    class Report:
        def __init__(self, command, **kwargs):
            commands.append(command)
            self.stdout, self.returncode = iter(["[1 of 1 finished] table5_batchnorm: ok (569 s)\n"]), 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(report_speed.subprocess, "Popen", Report)
    report_speed.main(["--profile", "cpu", "--only", "table5_batchnorm", "--amp", "--keep", str(tmp_path)])
    assert commands[0][commands[0].index("--only"):] == ["--only", "table5_batchnorm", "--amp"]
    assert commands[0][commands[0].index("--results-dir") + 1] == str(tmp_path / "results")
    assert re.search(r"^  table5_batchnorm\s+ok\s+569 s$", capsys.readouterr().out, re.M)


def test_report_speed_sums_where_a_stores_time_went(tmp_path, capsys):
    """`--records` sums each timing part over a results store's records, largest first, with how many hold it."""
    import report_speed

    (tmp_path / "records").mkdir()
    timings = [{"train_train_s": 10.0, "train_eval_s": 4.0, "eval_sts_test_s": 50.5},
               {"train_train_s": 12.0, "train_eval_s": 3.0}, {"eval_sts_test_s": 40.0, "eval_transfer_test_s": 200.0}]
    for i, parts in enumerate(timings):
        (tmp_path / "records" / f"k{i}.json").write_text(json.dumps({"key": f"k{i}", "timings": parts}))
    report_speed.main(["--records", str(tmp_path)])
    lines = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert lines == [["eval_transfer_test_s", "200", "s", "in", "1", "records"],
                     ["eval_sts_test_s", "90", "s", "in", "2", "records"],
                     ["train_train_s", "22", "s", "in", "2", "records"],
                     ["train_eval_s", "7", "s", "in", "2", "records"], ["sum", "320", "s"]]
    with pytest.raises(SystemExit, match="for a `--keep DIR` run, DIR/results"):
        report_speed.main(["--records", str(tmp_path / "records")])  # a folder that is not a store


def test_report_speed_records_the_seconds_the_report_starts_longest_first_by(tmp_path, monkeypatch, capsys):
    """`--record` keeps each notebook's measured seconds under its profile (a notebook the report reused measures
    nothing), other profiles' untouched; the report then starts the longest first."""
    import report_speed

    from cse_kit import report
    from cse_kit.report import scheduling

    seconds = tmp_path / "seconds.json"
    seconds.write_text(json.dumps({"cpu": {"table1_sts": 900}, "smoke": {"figure2_cosine": 9}}))
    monkeypatch.setattr(scheduling, "NOTEBOOK_SECONDS", seconds)
    log = tmp_path / "console.log"
    log.write_text("[1 of 3 finished] table8_lambda: ok (39 s)\n[2 of 3 finished] table1_sts: reused (0 s)\n"
                   "[3 of 3 finished] compare_methods: ok (122 s)\n")
    report_speed.main(["--logs", str(log), "--record", "--profile", "smoke"])
    assert json.loads(seconds.read_text()) == {"cpu": {"table1_sts": 900}, "smoke": {
        "compare_methods": 122, "figure2_cosine": 9, "table8_lambda": 39}}
    assert "recorded 2 notebooks' seconds" in capsys.readouterr().out
    assert report.longest_first(["figure2_cosine", "table8_lambda", "compare_methods"], "smoke") == [
        "compare_methods", "table8_lambda", "figure2_cosine"]


@pytest.mark.slow  # a benchmark script's own run: a 7-STS test encoding, checked with -m slow
def test_diffaug_start_reads_each_part_of_diffaugs_test_model_apart(data_dir):
    """bench/diffaug_start.py on the smoke BERT: a line per reading, and DiffAug's freshly initialised prefix reads as
    a zero one does (its values are about 0: what the test model loses is where the prefix puts the sentence)."""
    lines = [line.split(" | ") for line in run_bench("diffaug_start.py", "--model", "smoke-bert", "--test", "fresh",
                                                     data_dir=data_dir).splitlines()[2:]]
    dev = {line[0].strip("| "): float(line[3]) for line in lines}
    assert list(dev) == ["avg", "cls_before_pooler", "prompt_mask", "prompt_mask_denoised", "shift", "zero",
                         "zero+shift", "fresh"]
    assert abs(dev["fresh"] - dev["zero+shift"]) < 1 and dev["fresh"] != dev["prompt_mask"]
    assert math.isfinite(float(lines[-1][4])) and lines[0][4] == "nan"  # the 7-STS test of the named line only


@pytest.mark.parametrize("preset", ["simcse-bert", "diffaug-semi-bert"])
def test_mini_budget_counts_a_runs_steps_as_the_training_loop_does(preset, data_dir, tmp_path):
    """bench/mini_budget.py --plan prices the mini report by each run's steps: the count it makes (batches rounded up,
    times epochs, DiffAug's stage 1 added) is what a run takes, here a smoke run's."""
    import mini_budget

    from cse_kit.train import build_config, train

    cfg = build_config(preset, "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir)})
    summary = train(cfg, progress=False, announce=lambda line: None)
    stage1, main = mini_budget.steps_of(cfg, data_dir)
    assert stage1 + main == summary["steps"] and stage1 == (cfg.stage1_steps if cfg.method == "diffaug" else 0)


def test_tune_overhead_times_the_search_beside_a_trials_training(data_dir):
    """bench/tune_overhead.py (issue 69): the search's own cost per trial in its parts, for SQLite and (where
    Debian's postgresql is installed) a PostgreSQL server it starts, beside the smoke trials' training, and the CPU."""
    sys.path.insert(0, str(REPO / "tests"))
    import postgres_server

    stdout = run_bench("tune_overhead.py", "--trials", "2", "--rounds", "1", data_dir=data_dir)
    assert re.search(r"^CPU: .+, \d+ cores, bf16 units: ", stdout, re.M), stdout
    assert re.search(r"^smoke: 2 trials trained, median \d+\.\d\d s a trial$", stdout, re.M), stdout
    storages = ["sqlite"] + ([] if postgres_server.missing() else ["postgresql"])
    for storage in storages:  # next_trial, store lookup, tell, heartbeat+setup, search (ms); training; the ratio
        assert re.search(rf"^smoke\s+{storage}\s+(\d+\.\d\s+){{5}}\d+\.\d\ds\s+\d+\.\d\d%$", stdout, re.M), stdout


# --- the loop's step, timed (issue 75): --pad, --compile MODE, and the GPU node check ---------------------------------

def test_the_bench_times_the_loops_own_step():
    """paper_speed's step is cse_kit.train.step.TrainStep's: only where its batches come from is its own."""
    from cse_kit.train.step import TrainStep

    assert issubclass(paper_speed.TimedStep, TrainStep)
    own = {name for name, value in vars(paper_speed.TimedStep).items() if callable(value)}
    assert "step" not in own and own <= {"prepare", "batch", "timed", "compiled", "sync", "stage_of"}


def test_the_cpu_profile_bench_steps_as_the_loop_does(data_dir):
    """train_speed's per-method mode times paper_speed's step (one benchmark of training steps, issue 82): a timed
    step moves the weights exactly as a TrainStep built by cse_kit.train.setup moves a copy, on the same batch."""
    import copy

    import train_speed

    from cse_kit.models import load_encoder
    from cse_kit.train import build_config, build_objective
    from cse_kit.train.data import Batches, load_examples, tokenize, tokenized_cache_dir
    from cse_kit.train.precision import build_accelerator
    from cse_kit.train.setup import optimization, stage_steps
    from cse_kit.train.step import TrainStep

    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir)})
    tokenizer, encoder = load_encoder(cfg.model)
    objective = build_objective(cfg, tokenizer, encoder)
    twin, initial = copy.deepcopy(objective), copy.deepcopy(objective.state_dict())
    corpus = load_examples("Wiki1M-sample", str(data_dir))[:64]
    batches = Batches(tokenize(corpus, tokenizer, 32, tokenized_cache_dir(str(data_dir))), 8, 0,
                      tokenizer.pad_token_id)
    timer = train_speed.StepTimer(cfg, objective, batches)
    assert isinstance(timer.step, paper_speed.TimedStep)
    accelerator = build_accelerator("no")
    first, main = stage_steps(cfg, batches.steps_per_epoch, twin)
    run = optimization(cfg, twin, accelerator, first, main)
    loop = TrainStep(cfg, accelerator, run.objective, run.unwrapped, run.params, run.optimizers, run.schedulers,
                     batches, None, first)
    for step in range(2):
        torch.manual_seed(step)
        assert timer(step) > 0
        torch.manual_seed(step)
        loop.step(step)
    ours, theirs = objective.state_dict(), twin.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in ours.items())
    assert not all(torch.equal(v, initial[k]) for k, v in ours.items())  # the steps trained


@pytest.mark.parametrize("given, mode", [("true", True), ("false", False), ("reduce-overhead", "reduce-overhead"),
                                         ("max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs")])
def test_compile_takes_a_mode_or_none(given, mode):
    import argparse

    p = argparse.ArgumentParser()
    paper_speed.add_arguments(p)
    assert p.parse_args(["--compile", given]).compile == mode
    assert p.parse_args(["--compile"]).compile is True and p.parse_args([]).compile is False
    with pytest.raises(SystemExit):
        p.parse_args(["--compile", "fast"])


@pytest.mark.parametrize("padding", ["fixed", "buckets"])
def test_repeated_corpus_batches_pad_to_its_examples_longest_row(padding, data_dir, minilm):
    """--pad fixed|buckets: the repeated corpus's longest row is its examples' (measured once, not over the million
    rows it repeats); every fixed batch has that width, a bucketed one the next bucket length up to it."""
    import argparse

    from cse_kit.eval.encode import BUCKET_LENGTHS
    from cse_kit.train import build_config

    tokenizer = minilm[0]
    cfg = build_config("simcse-bert", "paper", {"batch_size": 4})
    args = argparse.Namespace(shape="bert-base", data_dir=str(data_dir))
    batches = paper_speed.method_batches(cfg, tokenizer, args, padding=padding)
    examples = batches.dataset.examples
    assert len(batches.dataset) == 1_000_000
    assert batches.fixed_length == max(len(ids) for ids in tokenizer([e[0] for e in examples], truncation=True,
                                                                     max_length=32)["input_ids"]) == 32
    for step in range(5):
        batch = batches(step)
        longest = int(batch["attention_mask"].sum(-1).max())
        width = batch["input_ids"].shape[-1]
        if padding == "fixed":
            assert width == 32
        else:
            assert width == min(next(b for b in BUCKET_LENGTHS if b >= longest), 32)


def test_paper_speed_pads_fixed_and_times_data_and_step_apart(data_dir, tmp_path):
    """--pad fixed on the tiny shape: the loop's step on one shape, its data and step parts in the table and the JSON,
    its FLOPs those of the fixed width (6 x non-embedding weights x 2 rows x 2 views x 32)."""
    out = tmp_path / "speed.json"
    stdout = run_bench("train_speed.py", "--shape", "tiny", "--device", "cpu", "--methods", "simcse", "--steps", "2",
                       "--warmup", "1", "--batch-size", "2", "--dev-pairs", "8", "--pad", "fixed", "--sync-check", "1",
                       "--output", str(out), data_dir=data_dir)
    result = json.loads(out.read_text())
    assert result["complete"]
    check_train_table(stdout, result, ["simcse"])
    simcse = result["results"][0]
    assert simcse["padding"] == "fixed" and simcse["fixed_length"] == 32
    assert set(simcse["main"]["parts"]) == {"data", "step"} and all(v > 0 for v in simcse["main"]["parts"].values())
    params = paper_speed.nonembedding_params(paper_speed.shape_encoder("tiny"))
    assert simcse["main"]["flops"] == 6 * params * 2 * 2 * 32
    assert "padding: SimCSE fixed (32 tokens)" in stdout and "timed: the loop's step" in stdout
    assert re.search(r"^  SimCSE: data [\d.]+ ms, step [\d.]+ ms;", stdout, re.M), stdout
    assert simcse["syncs"] is None and "host synchronisations per step: n/a on cpu" in stdout


@pytest.mark.slow  # compiling the tiny encoder: about a minute on the 2 shared cores
def test_paper_speed_compiles_in_a_mode_through_the_loops_compile(data_dir, tmp_path):
    out = tmp_path / "speed.json"
    stdout = run_bench("train_speed.py", "--shape", "tiny", "--device", "cpu", "--methods", "simcse", "--steps", "2",
                       "--warmup", "1", "--batch-size", "2", "--dev-pairs", "8", "--pad", "fixed", "--compile",
                       "reduce-overhead", "--output", str(out), data_dir=data_dir)
    compiled = json.loads(out.read_text())["results"][0]["compile"]
    assert compiled["mode"] == "reduce-overhead" and compiled["captured"] is False  # CUDA graphs: on CUDA only
    assert compiled["step_s"] > 0 and set(compiled["parts"]) == {"data", "step"}
    assert re.search(r"compile SimCSE \(compile=reduce-overhead, not captured, pad fixed \(32 tokens\)\): [\d.]+ "
                     r"ms/step compiled vs [\d.]+ eager", stdout), stdout


def _log(run: Path, records: list[dict]) -> Path:
    run.mkdir()
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def test_gpu_check_compares_two_runs_dev_curves(tmp_path, capsys):
    import gpu_check

    dev = {"stsb_spearman": 40.1, "seconds": 1.5}
    later = {**dev, "stsb_spearman": 41.0}
    records = [{"step": 5, "lr": 1e-5, "loss": 2.5}, {"step": 5, "dev": dev}, {"step": 10, "dev": later}]
    a = _log(tmp_path / "a", records)
    b = _log(tmp_path / "b", [*records[:1], {"step": 5, "dev": {**dev, "seconds": 9.0}}, records[2]])  # wall time
    assert gpu_check.main(["same", str(a), str(b)]) == 0
    assert capsys.readouterr().out.startswith("deterministic runs: dev curves same (2 evaluations), logged losses "
                                              "same (1 logs); last stsb_spearman 41.0 vs 41.0 at step 10")
    c = _log(tmp_path / "c", [*records[:2], {"step": 10, "dev": {**dev, "stsb_spearman": 41.000001}}])
    assert gpu_check.main(["same", str(a), str(c)]) == 1
    assert "dev curves differ" in capsys.readouterr().out


@pytest.mark.slow  # every part of the node check on a tiny BERT: about 4 minutes on the 2 shared cores
def test_gpu_check_runs_every_part_on_a_cpu(data_dir, tmp_path):
    """bench/gpu_check.sh --device cpu: every part runs and its summary line says what it found."""
    out = tmp_path / "check"
    done = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--device", "cpu", "--out", str(out), "--data-dir",
                           str(data_dir)], cwd=REPO, env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert summary in done.stdout and "FAILED" not in summary and "timed out" not in summary, summary
    assert re.search(r"^node: cpu; torch \S+; CPU .+, \d+ cores$", summary, re.M), summary
    for name in ("SimCSE", "DiffCSE", "SCD", "ESimCSE", "DiffAug", "PromptBERT", "ConSERT"):
        captured = r"captured +[\d.]+ ms \([\d.]+x its eager" if name == "SimCSE" else r"captured: not measured"
        assert re.search(rf"^  {name} +batch +4 .* pad fixed +eager +[\d.]+ ms.* \| {captured}", summary, re.M), name
    assert "host synchronisations per step: n/a on cpu" in summary
    assert re.search(r"^sentence-transformers MNRL: SimCSE [\d.]+ ms/step vs MNRL [\d.]+ ms/step \(\w+, batch 8\): "
                     r"[\d.]+x as fast$", summary, re.M), summary
    assert re.search(r'^kill -9 and resume: killed after the checkpoint of step (\d+), "resuming at step \1", '
                     r"finished at step 20: ok$", summary, re.M), summary
    assert re.search(r"^deterministic runs: dev curves same \(2 evaluations\)", summary, re.M), summary
    assert re.search(r"^gradient caching \(chunks of 4, .*\): simcse batch 16: [\d.]+x time, [\d.]+x batch 4's "
                     r"memory$", summary, re.M), summary
    for kept in ("steps-eager.json", "steps-captured.json", "st-mnrl.json", "grad-cache.json", "resume.txt"):
        assert (out / kept).is_file(), kept
