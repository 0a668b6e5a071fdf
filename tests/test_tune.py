"""cse-kit tune (cse_kit.experiments.tuning): a study is the store's runs searched by Optuna at a total budget of
trials; it reads no test set, reruns train nothing, a killed worker's trial is run again, never lost or counted
twice, and bad input is refused in one line before any trial."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import psutil
import pytest

import cse_kit.eval.dev as dev
import cse_kit.eval.sts as sts
import cse_kit.train.loop as loop
from cse_kit import cli
from cse_kit.experiments.tuning import Study, TuneError, best, chosen_on_test, parse_space, run

SPACE = "lr=log(1e-5,1e-3); temp=(0.03,0.1)"


def _study(tmp_path, data_dir, trials=3, **kwargs) -> Study:
    return Study("simcse-bert", "smoke", parse_space(kwargs.pop("space", SPACE)), trials, kwargs.pop("overrides", []), 1,
                 str(tmp_path / "results"), str(data_dir), **kwargs)


def test_a_space_reads_every_kind_of_dimension_and_refuses_a_malformed_one():
    dims = parse_space("lr=log(1e-5,1e-4); temp=(0.02, 0.1); max_seq_length=int(16,64); pooler=[cls,avg]")
    assert [(d.name, d.kind, d.log) for d in dims] == [("lr", "float", True), ("temp", "float", False),
                                                      ("max_seq_length", "int", False), ("pooler", "categorical", False)]
    assert dims[3].choices == ("cls", "avg")
    for bad, words in [("lr=log(0,1e-4)", "lower bound > 0"), ("lr=(1e-4,1e-5)", "below the upper"),
                       ("lr=1e-4", "bad space dimension"), ("lr=log(1e-5,1e-4); lr=(1e-5,1e-4)", "twice"),
                       ("", "empty"), ("max_seq_length=int(1.5,4)", "integer bounds"), ("pooler=[cls]", "two or more")]:
        with pytest.raises(TuneError, match=words):
            parse_space(bad)


@pytest.mark.parametrize("args, words", [
    (["--space", "diffcse.nope=(0.1,0.2)"], "has no option 'nope'"),
    (["--space", "temp=(0.0001,0.1)"], "temp must be >= 0.001"),
    (["--space", "diffcse.mask_ratio=(0.1,1.5)"], "mask_ratio must be in \\(0, 1\\)"),
    (["--space", "lr=log(1e-5,1e-4)", "--set", "metric=sts_test"], "unknown metric 'sts_test'"),
    (["--space", "lr=log(1e-5,1e-4)", "--storage", "postgresql://kit:secret@127.0.0.1:9/none"], "does not answer"),
    (["--space", "lr=[1e-5"], "bad space dimension"),
])
def test_bad_input_is_one_line_before_any_trial(args, words, data_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("a trial ran"))
    code = cli.main(["tune", "--preset", "diffcse-bert-sts", "--profile", "smoke", "--trials", "2", "--results-dir",
                     str(tmp_path), "--data-dir", str(data_dir), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("cse-kit: error:"), err
    assert __import__("re").search(words, err[0]), err[0]
    assert "secret" not in err[0]  # a storage URL's password is not printed


def test_a_study_reads_no_test_set_and_only_the_chosen_configuration_is_tested(data_dir, tmp_path, monkeypatch):
    reads = []
    real = sts.load_sts

    def watched(task, split=None, data_dir=None):
        reads.append((task, split))
        return real(task, split, data_dir)

    for module in (sts, dev):  # the dev evaluation of training (eval/dev.py) and every STS evaluation (eval/sts.py)
        monkeypatch.setattr(module, "load_sts", watched)
    study = _study(tmp_path, data_dir, trials=3)
    trials = run(study)
    assert [t["state"] for t in trials] == ["complete"] * 3 and len({t["key"] for t in trials}) == 3
    assert reads and all(split == "dev" for _, split in reads)  # STS-B dev selects; no test split is read
    records = chosen_on_test(study, [1, 2])
    assert any(split != "dev" for _, split in reads)
    chosen = best(study)
    assert records[0]["key"] == chosen["key"] and records[0]["metrics"]["sts_test"]["avg"] > 0
    assert records[1]["config"]["seed"] == 2 and records[1]["config"]["lr"] == chosen["params"]["lr"]


def test_trials_is_the_total_and_a_rerun_trains_nothing(data_dir, tmp_path, monkeypatch):
    study = _study(tmp_path, data_dir, trials=2)
    first = run(study)
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("retrained a trial"))
    assert run(study) == first  # the same total: nothing sampled, nothing trained
    more = run(_study(tmp_path, data_dir, trials=3))  # a larger total adds only what is missing
    assert len(more) == 3 and more[:2] == first


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    return [p for p in parent.children(recursive=True) if "cse_kit.experiments.tuning" in " ".join(p.cmdline())]


@pytest.mark.slow  # 8 trainings in 3 processes, one killed: about 2 minutes on 2 cores
def test_a_worker_killed_mid_study_leaves_its_trial_run_again_once(data_dir, tmp_path):
    """8 trials on 2 worker processes; one is killed (SIGKILL) while it trains; the rerun runs the killed trial's
    parameters again (the heartbeat stopped), and a rerun after that trains nothing."""
    argv = [sys.executable, "-m", "cse_kit.cli", "tune", "--preset", "simcse-bert", "--profile", "smoke", "--trials",
            "8", "--space", SPACE, "--workers", "2", "--heartbeat", "1", "--results-dir", str(tmp_path / "results"),
            "--data-dir", str(data_dir)]
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    parent = psutil.Process(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE).pid)
    storage = f"sqlite:///{tmp_path / 'results' / 'studies.sqlite3'}"
    deadline, victim = time.time() + 300, None
    while victim is None and time.time() < deadline:
        time.sleep(0.5)
        try:
            [name] = optuna.get_all_study_names(storage)
            running = optuna.load_study(study_name=name, storage=storage).get_trials(
                states=(optuna.trial.TrialState.RUNNING,))
        except (ValueError, KeyError, Exception):
            continue
        workers = _workers(parent)
        if running and len(workers) == 2 and any((tmp_path / "results" / "runs").glob("*/log.jsonl")):
            victim = workers[0]
    assert victim is not None, "no trial was running"
    victim.send_signal(signal.SIGKILL)
    parent.wait(timeout=600)
    time.sleep(5)  # past the killed trial's grace period (4 heartbeats)

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 8 and set(states) <= {"COMPLETE", "FAIL"}, states
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    assert len(failed) <= 1  # the killed worker's trial (if it was not the last to finish its run)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len({t.user_attrs["key"] for t in complete}) == 8  # every trial once
    for dead in failed:  # run again with the same parameters
        assert any(t.params == dead.params for t in complete)

    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and len(optuna.load_study(study_name=study.study_name, storage=storage).trials) == \
        len(study.trials)
    records = list((tmp_path / "results" / "records").glob("*.json"))
    assert len(records) == 8 and all(json.loads(r.read_text())["train"]["best"] is not None for r in records)
