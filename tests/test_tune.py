"""cse-kit tune (cse_kit.tune): a study is the store's runs searched by Optuna at a total budget of
trials; it reads no test set, reruns train nothing, a killed worker's trial is run again, never lost or counted
twice, and bad input is refused in one line before any trial."""

import json
import os
import re
import signal
import socket
import subprocess
import time

import optuna
import psutil
import pytest

import cse_kit.eval.dev as dev
import cse_kit.eval.sts as sts
import cse_kit.train.loop as loop
from cse_kit import cli
from cse_kit.tune import Study, TuneError, best, chosen_on_test, fail_running, load, parse_space, run

import kit_process
from conftest import cli_env

SPACE = "lr=log(1e-5,1e-3); temp=(0.03,0.1)"


def _study(tmp_path, data_dir, trials=3, **kwargs) -> Study:
    return Study("simcse-bert", "smoke", parse_space(kwargs.pop("space", SPACE)), trials, kwargs.pop("overrides", []), 1,
                 str(tmp_path / "results"), str(data_dir), **kwargs)


def test_a_space_reads_every_kind_of_dimension_and_refuses_a_malformed_one():
    dims = parse_space("lr=log(1e-5,1e-4); temp=(0.02, 0.1); max_seq_length=int(16,64); pooler=[cls,avg]")
    assert [(d.name, d.kind, d.log) for d in dims] == [("lr", "float", True), ("temp", "float", False),
                                                      ("max_seq_length", "int", False), ("pooler", "categorical", False)]
    assert dims[3].choices == ("cls", "avg")
    assert dims[2].ends() == [16, 64] and all(type(end) is int for end in dims[2].ends())  # an option typed int
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
    (["--space", "lr=log(1e-5,1e-4)", "--dashboard", "localhost:web"], "give a port \\(8080\\)"),
    (["--space", "lr=log(1e-5,1e-4)", "--test-seeds", "1;2"], "whole numbers separated by commas"),
    (["--space", "lr=log(1e-5,1e-4)", "--prune", "patience"], "name one of median, percentile"),
    (["--space", "lr=log(1e-5,1e-4)", "--prune", "median(warmup=3)"], "MedianPruner refuses it .*warmup"),
    (["--space", "lr=log(1e-5,1e-4)", "--prune", "percentile(percentile=120)"], "PercentilePruner refuses it"),
    (["--space", "lr=(1e-5,inf)"], "the bounds must be finite numbers"),
    (["--space", "temp=(-1e308,1e308)"], "less than 1e308 apart"),
    (["--space", "lr=log(1e-5,1e-4)", "--heartbeat", "0"], "--heartbeat takes 1 s or more"),
    (["--space", "lr=log(1e-5,1e-4)", "--storage-patience", "-5"], "--storage-patience 0 s or more"),
    (["--space", "lr=log(1e-5,1e-4)", "--failures-in-a-row", "0"], "--failures-in-a-row 1 or more"),
    (["--space", "lr=log(1e-5,1e-4)", "--study", "a/b c;drop"], "a study's name is letters"),
    (["--space", "lr=log(1e-5,1e-4)", "--study", "../../escape"], "a study's name is letters"),
    (["--space", "lr=log(1e-5,1e-4)", "--storage", "nosuch://host/db"], "does not answer .*nosuch"),
])
def test_bad_input_is_one_line_before_any_trial(args, words, data_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("a trial ran"))
    code = cli.main(["tune", "--preset", "diffcse-bert-sts", "--profile", "smoke", "--trials", "2", "--results-dir",
                     str(tmp_path), "--data-dir", str(data_dir), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("cse-kit: error:"), err
    assert __import__("re").search(words, err[0]), err[0]
    assert "secret" not in err[0]  # a storage URL's password is not printed
    if "--dashboard" not in args:  # every other refusal comes before the storage opens: nothing under locks/
        assert not (tmp_path / "locks").exists() and not list(tmp_path.parent.glob("**/escape*"))


def test_a_server_that_refuses_the_database_or_the_password_is_one_line_and_nothing_is_locked(postgresql, data_dir,
                                                                                              tmp_path, capsys):
    """A missing database and a wrong password on a real PostgreSQL: one line each, and no storage lock left under
    locks/ for a storage that never opened."""
    url = postgresql.database("refusing", "lab", "s3cret")
    for wrong in (url.rsplit("/", 1)[0] + "/nosuchdb", url.replace("s3cret", "wrong")):
        code = cli.main(["tune", "--preset", "simcse-bert", "--profile", "smoke", "--trials", "1", "--space",
                         "lr=log(1e-5,1e-4)", "--storage", wrong, "--results-dir", str(tmp_path), "--data-dir",
                         str(data_dir)])
        [line] = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and "does not answer" in line and "s3cret" not in line and "wrong" not in line, line
    assert not (tmp_path / "locks").exists()


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
    monkeypatch.undo()
    more = run(_study(tmp_path, data_dir, trials=3))  # a larger total adds only what is missing
    assert len(more) == 3 and more[:2] == first


def test_on_a_journal_file_a_killed_workers_trial_runs_again_after_fail_running(data_dir, tmp_path):
    """Optuna's journal file (`--storage journal:PATH`, for a shared file system) has no heartbeat: a trial whose
    worker was killed stays running and counts, so the study waits; --fail-running marks it failed and its
    parameters are run again, once."""
    study = _study(tmp_path, data_dir, trials=1, storage=f"journal:{tmp_path / 'study.journal'}")
    killed = load(study).ask()  # a worker that asked for its trial and was killed before it told the outcome
    killed.suggest_float("lr", 1e-5, 1e-3, log=True), killed.suggest_float("temp", 0.03, 0.1)
    assert [t["state"] for t in run(study)] == ["running"]  # the total is held: nothing else runs
    assert fail_running(study) == 1
    trials = run(study)
    assert [t["state"] for t in trials] == ["fail", "complete"] and trials[0]["params"] == trials[1]["params"]
    assert fail_running(study) == 0 and run(study) == trials


def _dev_steps(run) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "dev" in r]


def test_a_pruned_trial_is_recorded_pruned_its_run_unfinished_and_resumed_by_whoever_needs_it(data_dir, tmp_path,
                                                                                             monkeypatch):
    """--prune: each dev evaluation of a trial's run (every 2 of its 8 steps) is reported to Optuna's pruner; a run it
    stops is a PRUNED trial with the dev score it reached, and the store holds no record of it: only the run's
    checkpoint of that step. A rerun trains nothing; the chosen configuration comes from complete trials only; the
    same run asked for without a pruner resumes at that checkpoint and ends as an uninterrupted run does."""
    from cse_kit.results import ResultStore

    study = _study(tmp_path, data_dir, trials=2, overrides=["eval_steps=2"], prune="threshold(lower=100)")  # any score
    trials = run(study)
    assert [t["state"] for t in trials] == ["pruned"] * 2
    assert all(list(t["dev_curve"]) == [2] and t["value"] == t["dev_curve"][2] for t in trials)
    results = tmp_path / "results"
    assert not list((results / "records").glob("*.json"))  # never a finished run
    for trial in trials:
        unfinished = results / "runs" / trial["key"]
        assert loop.checkpoint_step(unfinished / "checkpoint") == 2 and not (unfinished / "summary.json").exists()
        assert _dev_steps(unfinished) == [2]
    with pytest.raises(TuneError, match="no complete trial"):
        best(study)
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("a rerun trained a pruned trial"))
    assert run(study) == trials
    monkeypatch.undo()

    cfg = study.config(trials[0]["params"])
    resumed = study.store().get(cfg, ())
    assert resumed["key"] == trials[0]["key"] and resumed["train"]["steps"] == 8
    assert [r["step"] for r in resumed["dev_curve"]] == [2, 4, 6, 8]
    uninterrupted = ResultStore(str(tmp_path / "fresh"), str(data_dir)).get(cfg, ())
    scores = [[(r["step"], r["dev"]["stsb_spearman"]) for r in record["dev_curve"]]
              for record in (resumed, uninterrupted)]
    assert scores[0] == scores[1] and resumed["train"]["best"] == uninterrupted["train"]["best"]


def test_a_pruner_that_would_stop_a_run_at_its_last_evaluation_lets_it_finish(data_dir, tmp_path):
    """The last evaluation ends the run anyway: a prune there would throw away a finished run."""
    study = _study(tmp_path, data_dir, trials=1, overrides=["eval_steps=2"],
                   prune="threshold(lower=100, n_warmup_steps=8)")  # would prune at step 8 only
    [trial] = run(study)
    assert trial["state"] == "complete" and list(trial["dev_curve"]) == [2, 4, 6, 8]
    record = json.loads((tmp_path / "results" / "records" / f"{trial['key']}.json").read_text())
    assert record["train"]["steps"] == 8 and trial["value"] == record["train"]["best"]


def test_without_prune_a_study_keeps_its_name_and_with_it_is_another_study(data_dir, tmp_path):
    plain = _study(tmp_path, data_dir)
    assert plain.name == Study(**{**plain.__dict__, "name": None, "prune": None}).name
    assert _study(tmp_path, data_dir, prune="median").name != plain.name


def test_slurm_jobs_train_every_trial_in_the_precision_the_submitter_keys(data_dir, tmp_path):
    """A SLURM job resolves `mixed_precision=auto` on its own node (a GPU, another CPU); the study sent to the jobs
    carries the precision the report's workers are sent (parallel.for_workers), so the winning trial is the run the
    submitter's --test-seeds key, and the study keeps its name. A profile with a fixed precision is sent as it is."""
    from cse_kit.tune import sent_to_jobs
    from cse_kit.results import parallel
    from cse_kit.train.precision import resolve_precision

    for profile, gpu in [("cpu", False), ("paper", True)]:
        study = Study("simcse-bert", profile, parse_space(SPACE), 2, [], 1, str(tmp_path / "r"), str(data_dir))
        sent = sent_to_jobs(study)
        assert sent.name == study.name and sent.results_dir == str(tmp_path / "r")
        assert sent.config({}).mixed_precision == resolve_precision("auto", gpu) != study.config({}).mixed_precision
        assert sent.config({}) == parallel.for_workers(study.config({}), "slurm")
    smoke = _study(tmp_path, data_dir)
    assert sent_to_jobs(smoke).overrides == smoke.overrides  # smoke trains in fp32 everywhere


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    return [p for p in parent.children(recursive=True) if "cse_kit.tune" in " ".join(p.cmdline())]


@pytest.mark.slow  # 8 trainings in 3 processes, one killed: about 2 minutes on 2 cores
def test_a_worker_killed_mid_study_leaves_its_trial_run_again_once(data_dir, tmp_path):
    """8 trials on 2 worker processes; one is killed (SIGKILL) while it trains; the rerun runs the killed trial's
    parameters again (the heartbeat stopped), and a rerun after that trains nothing."""
    argv = ["tune", "--preset", "simcse-bert", "--profile", "smoke", "--trials", "8", "--space", SPACE, "--workers",
            "2", "--heartbeat", "1", "--results-dir", str(tmp_path / "results"), "--data-dir", str(data_dir)]
    env = {**cli_env(), "TRANSFORMERS_VERBOSITY": "error"}
    parent = psutil.Process(kit_process.popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE).pid)
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


def _tune_argv(tmp_path, data_dir, trials: int, *more: str) -> list[str]:
    """`cse-kit tune` of a smoke SimCSE study on the learning rate, as the docs' commands run it."""
    return ["tune", "--preset", "simcse-bert", "--profile", "smoke", "--trials", str(trials), "--space",
            "lr=log(1e-5,1e-3)", "--results-dir", str(tmp_path / "results"), "--data-dir", str(data_dir), *more]


def _trials_in(storage: str) -> list:
    from cse_kit.tune.storage import with_driver

    url = with_driver(storage)
    [name] = optuna.get_all_study_names(url)
    return optuna.load_study(study_name=name, storage=url).trials


def test_a_study_on_a_real_postgresql_runs_to_its_total_and_a_rerun_trains_nothing(postgresql, data_dir, tmp_path,
                                                                                  capsys, monkeypatch):
    """`--storage postgresql://user:password@host:port/db` on a PostgreSQL server started from Debian's package
    (tests/postgres_server.py), with a database and user of its own and password authentication over TCP, as a lab's
    server asks: the smoke study runs its 3 trials to completion, they are rows of that database, the chosen
    configuration is tested over seeds 1 and 2, and the same command again trains nothing and prints the same."""
    url = postgresql.database("tune_smoke", "kit", "s3cret")
    argv = _tune_argv(tmp_path, data_dir, 3, "--storage", url, "--test-seeds", "1,2")
    assert cli.main(argv) == 0
    first = capsys.readouterr().out
    assert re.search(r"^test \(STS avg, 2 seeds \[1, 2\]\): \d+\.\d\d ± \d+\.\d\d$", first, re.M), first
    assert [t.state.name for t in _trials_in(url)] == ["COMPLETE"] * 3
    assert postgresql.sql("SELECT count(*) FROM trials WHERE state = 'COMPLETE'", "tune_smoke") == "3"
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("a rerun trained a trial"))
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == first and len(_trials_in(url)) == 3
    assert "s3cret" not in first


@pytest.mark.slow  # two SLURM jobs start Python and torch on a loaded 2-core machine: about a minute
def test_a_study_on_slurm_against_postgresql_runs_in_jobs_and_a_rerun_sends_none(slurm, postgresql, data_dir, tmp_path):
    """docs/tuning.md's cluster command: `--workers 2 --cluster slurm --storage postgresql://...`, two SLURM jobs on
    one study in a lab's database; every trial complete once; the chosen configuration's seeds 1 and 2 are tested
    in jobs too (seed 1's run is the winning trial's, evaluated, not trained); a rerun sends no job and trains
    nothing."""
    url = postgresql.database("tune_slurm", "lab", "s3cret")
    env = {**os.environ, "CSE_KIT_JOBS_DIR": str(tmp_path / "jobs"), "TQDM_DISABLE": "1"}
    argv = _tune_argv(tmp_path, data_dir, 4, "--workers", "2", "--cluster", "slurm", "--storage", url, "--test-seeds",
                      "1,2")
    done = kit_process.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert re.search(r"2 SLURM jobs \(\d+, \d+\)", done.stdout), done.stdout
    trials = _trials_in(url)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4 and len({t.user_attrs["key"] for t in trials}) == 4
    assert "2 runs pending: 2 workers (slurm)" in done.stdout, done.stdout  # the seeds' tests, as jobs
    assert re.search(r"^test \(STS avg, 2 seeds \[1, 2\]\): \d+\.\d\d ± \d+\.\d\d$", done.stdout, re.M), done.stdout
    logs = sorted((tmp_path / "jobs").glob("*_log.err"))
    assert len(logs) == 4 and all(p.name.split("_")[0].isdigit() for p in logs)  # what each job logged
    records = [json.loads(r.read_text()) for r in (tmp_path / "results" / "records").glob("*.json")]
    assert len(records) == 5 and sum("sts_test" in r["metrics"] for r in records) == 2  # 4 trials and seed 2

    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "SLURM jobs" not in again.stdout and "pending" not in again.stdout, \
        again.stdout + again.stderr[-3000:]
    assert len(list((tmp_path / "jobs").glob("*_log.err"))) == 4 and len(_trials_in(url)) == 4
    assert len(list((tmp_path / "results" / "records").glob("*.json"))) == 5


def test_the_dashboard_lists_the_studys_trials_with_their_values_in_a_browser(data_dir, tmp_path):
    """`cse-kit tune ... --dashboard PORT`: optuna-dashboard on the study's storage while it runs and after it, until
    Ctrl-C; in headless Chromium its trial list shows every trial with its dev score; Ctrl-C ends it with exit 0."""
    from test_notebooks import CHROMIUM, headless_page

    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tune = kit_process.popen(_tune_argv(tmp_path, data_dir, 2, "--dashboard", str(port)),
                             env={**os.environ, "TQDM_DISABLE": "1"}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    try:
        lines = []
        while not (lines and "the dashboard stays" in lines[-1]):
            lines.append(tune.stdout.readline())
            assert lines[-1] or tune.poll() is None, "".join(lines)
        assert lines[0] == f"dashboard: http://127.0.0.1:{port}/dashboard\n", lines  # printed before the trials
        trials = _trials_in(f"sqlite:///{tmp_path / 'results' / 'studies.sqlite3'}")
        assert [t.state.name for t in trials] == ["COMPLETE"] * 2
        with sync_playwright() as playwright:
            browser, page = headless_page(playwright, tmp_path / "chromium-dashboard", 1400, 1000, 120_000)
            page.goto(f"http://127.0.0.1:{port}/dashboard")
            page.get_by_text(_study_name(lines)).first.click()  # the list of studies, as a person opens one
            page.wait_for_url(re.compile(r"/dashboard/studies/\d+$"))
            page.goto(f"{page.url}/trials")  # its trial list ("Trials (List)" in the side bar)
            expect(page.get_by_text(f"{len(trials)} Trials")).to_be_visible()
            for trial in trials:  # each trial of the list, and its value in its pane
                page.get_by_text(f"Trial {trial.number}", exact=True).first.click()
                expect(page.locator("body")).to_contain_text(f"Trial {trial.number} (trial_id=")
                expect(page.locator("body")).to_contain_text(repr(trial.value))
            page.screenshot(path=tmp_path / "dashboard.png")
            browser.close()
        tune.send_signal(signal.SIGINT)
        assert tune.wait(timeout=60) == 0
    finally:
        if tune.poll() is None:
            tune.kill()
    with socket.socket() as probe:  # the dashboard stopped with the command
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def _study_name(lines: list[str]) -> str:
    return next(re.match(r"study (\S+) ", line).group(1) for line in lines if line.startswith("study "))
