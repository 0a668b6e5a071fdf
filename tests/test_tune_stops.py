"""`cse-kit tune` where a study cannot succeed, or is stopped: real processes, signals, locks and file systems (a
tmpfs for the full disk), never mocks. Each time the command's exit code and its one line, nothing left RUNNING that a
rerun does not take up at once, and once the fault is mended the completed configurations are an uninterrupted
study's (docs/tuning.md, "When things go wrong")."""

import re
import signal
import subprocess
import time
from pathlib import Path

import optuna
import psutil
import pytest

from cse_kit import tune as tuning
from cse_kit.tune import Study, StudyStopped, parse_space, trials

import kit_process
from test_tune_faults import ENV, SPACE, _argv, _configurations, _sqlite, _states, _when_a_trial_trains
from test_write_failures import fill, small_disk  # noqa: F401 (a fixture)


def _trials_on_disk(url: str) -> list:
    """The study's trials, its file closed after (a tmpfs it lies on can then be unmounted)."""
    storage = optuna.storages.RDBStorage(url)
    try:
        [name] = optuna.get_all_study_names(storage)
        return optuna.load_study(study_name=name, storage=storage).trials
    finally:
        storage.engine.dispose()


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def _uninterrupted(data_dir, folder: Path, trials: int) -> list[dict]:
    results = folder / "uninterrupted"
    done = kit_process.run(_argv(results, data_dir, trials), env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return _configurations(_trials_on_disk(_sqlite(results)))


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory) -> list[dict]:
    """The configurations of a 3-trial study of seed 1 that nothing interrupted."""
    return _uninterrupted(data_dir, tmp_path_factory.mktemp("stops"), 3)


def test_a_full_disk_under_the_store_stops_the_study_at_once_and_the_mended_rerun_draws_the_same_configurations(
        small_disk, data_dir, tmp_path, uninterrupted):  # noqa: F811 (the fixture)
    """The results store on a full tmpfs, the study's SQLite file elsewhere: the first trial trains, cannot write its
    run, and the command stops there (exit 2, one line saying the disk is full and that the trial's configuration
    runs first), not drawing another; after space is freed the same command finishes with the uninterrupted
    study's configurations."""
    results, storage = small_disk / "results", f"sqlite:///{tmp_path / 'study.sqlite3'}"
    argv = [*_argv(results, data_dir, 3), "--storage", storage]
    filler = fill(small_disk, 64 << 10)
    start = time.monotonic()
    full = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert full.returncode == 2, full.stderr[-2000:]
    [line] = _lines(full.stderr)
    assert re.match(r"cse-kit: error: trial 0 failed: the disk is full \(cannot write .*No space left on device",
                    line), line
    assert "the study stops" in line and "trial 0's configuration runs first when the same command runs again" in line
    assert sorted(_states(_trials_on_disk(storage))) == ["FAIL", "WAITING"]  # one trial tried, its configuration queued
    print(f"the full-disk study stopped after {time.monotonic() - start:.1f} s")

    filler.unlink()
    rerun = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    trials = _trials_on_disk(storage)
    assert sorted(_states(trials)) == ["COMPLETE"] * 3 + ["FAIL"] and _configurations(trials) == uninterrupted


def test_a_full_disk_under_the_study_file_is_said_as_a_full_disk_and_the_rerun_finishes(
        small_disk, data_dir, uninterrupted):  # noqa: F811 (the fixture)
    """The default SQLite study file beside the store on a tmpfs that fills after the study's first trial: SQLite's
    "database or disk is full" is said as a full disk (not as a storage that stopped answering), at once, with no
    trial left running; after space is freed the same command finishes the total with the uninterrupted study's
    configurations."""
    results = small_disk / "results"
    first = kit_process.run(_argv(results, data_dir, 1), env=ENV, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    filler = fill(small_disk, 0)
    start = time.monotonic()
    full = kit_process.run([*_argv(results, data_dir, 3), "--storage-patience", "60"], env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert full.returncode == 2 and time.monotonic() - start < 30, full.stderr[-2000:]  # not waited out for 60 s
    [line] = _lines(full.stderr)
    assert re.match(rf"cse-kit: error: the disk holding the study's storage {re.escape(str(results))}/studies.sqlite3 "
                    r"is full \(OperationalError: database or disk is full\): free space there", line), line
    filler.unlink()
    assert "RUNNING" not in _states(_trials_on_disk(_sqlite(results)))
    rerun = kit_process.run(_argv(results, data_dir, 3), env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _configurations(_trials_on_disk(_sqlite(results))) == uninterrupted


def test_a_study_is_one_preset_and_its_one_seed_test_prints_no_spread(data_dir, tmp_path):
    """`--study shared` run with simcse-bert, then named with diffcse-bert-sts: refused in one line naming both,
    before any trial. Another space on the same preset joins, each trial recording its own; `--test-seeds 1` prints
    the seed's score without "± nan"."""
    results = tmp_path / "results"
    simcse = [*_argv(results, data_dir, 1), "--study", "shared"]
    assert kit_process.run(simcse, env=ENV, capture_output=True, timeout=600).returncode == 0
    other = [a.replace("simcse-bert", "diffcse-bert-sts") for a in simcse]
    refused = kit_process.run(other, env=ENV, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2
    [line] = _lines(refused.stderr)
    assert line == ("cse-kit: error: study shared is a study of simcse-bert on smoke, stsb_spearman, no --set; this command "
                    "is of diffcse-bert-sts on smoke, stsb_spearman, no --set: a study is one preset, profile, objective "
                    "and base settings. Name another study (--study), or none: the name then follows from what is "
                    "searched"), line
    wider = [*_argv(results, data_dir, 2), "--study", "shared", "--test-seeds", "1"]
    wider[wider.index(SPACE)] = "lr=log(1e-5,1e-3)"
    tested = kit_process.run(wider, env=ENV, capture_output=True, text=True, timeout=600)
    assert tested.returncode == 0, tested.stderr[-2000:]
    assert re.search(r"^test \(STS avg, 1 seed \[1\]\): -?\d+\.\d\d$", tested.stdout, re.M), tested.stdout
    trials = _trials_on_disk(_sqlite(results))
    assert [len(t.user_attrs["space"]) for t in trials] == [2, 1]
    assert "study shared of simcse-bert on smoke" in tested.stdout


def _study(tmp_path, data_dir, **kwargs) -> Study:
    return Study("simcse-bert", "smoke", parse_space(SPACE), kwargs.pop("trials", 3), [], 1,
                 str(tmp_path / "results"), str(data_dir), **kwargs)


def test_a_configuration_whose_worker_dies_past_the_cap_is_said_given_up_not_rerun(data_dir, tmp_path):
    """Trial locks released without a tell, as the kernel releases a killed worker's: the configuration is queued
    again RETRIES times, each said "it is run again", then said given up, and a new configuration is drawn (the next
    place's); the study never holds more than its total plus the retries."""
    study = _study(tmp_path, data_dir)
    optuna_study, said = tuning.load(study), []
    trial, lock = tuning.next_trial(study, optuna_study, said.append)
    first = trial.params if trial.params else {d.name: d.suggest(trial) for d in study.space}
    for death in range(tuning.RETRIES + 1):
        lock.release()  # the worker dies holding the trial
        trial, lock = tuning.next_trial(study, optuna_study, said.append)
        params = {d.name: d.suggest(trial) for d in study.space}
        assert (params == first) == (death < tuning.RETRIES), death
    lock.release()
    assert [line.endswith("it is run again (its run reused from the store, or resumed from its checkpoint)")
            for line in said] == [True] * tuning.RETRIES + [False]
    assert "its configuration's worker has now died 4 times: the configuration is given up" in said[-1]
    assert len(optuna_study.trials) == 1 + tuning.RETRIES + 1


def test_a_trial_failed_behind_a_workers_back_ends_it_in_one_line(data_dir, tmp_path):
    """A worker that comes back to a trial another worker failed (the heartbeat of a worker outside this store):
    one line naming what happened, not Optuna's "Cannot tell a FAIL trial"."""
    study = _study(tmp_path, data_dir)
    optuna_study = tuning.load(study)
    trial, lock = tuning.next_trial(study, optuna_study)
    tuning.load(study).tell(trial.number, state=optuna.trial.TrialState.FAIL)
    with pytest.raises(StudyStopped, match=r"^trial 0 was marked fail by another worker while this one was silent "
                                           r"past the heartbeat's grace \(120 s\)"):
        trials._tell(study, optuna_study, trial, study.store(), values=1.0)
    lock.release()


def _wait_for(predicate, timeout: float = 120, what: str = "") -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("stop", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_stops_the_study_in_one_line_and_the_rerun_continues_it(stop, data_dir, tmp_path, uninterrupted):
    """SIGTERM (a scheduler, `kill`) or SIGINT while trial 1 trains: exit 143 or 130, one line saying the study
    continues on rerun, no trial RUNNING (trial 1 failed, its configuration WAITING first); the same command then
    finishes with the uninterrupted study's configurations."""
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 3)
    process = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _when_a_trial_trains(process, results, 1)
    process.send_signal(stop)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + stop, err[-2000:]
    [line] = _lines(err)
    assert line.endswith("Rerun the same command to continue the study: its finished trials are kept, and a trial "
                         "stopped midway runs first, its run resumed from its checkpoint."), line
    assert _states(_trials_on_disk(_sqlite(results))) == ["COMPLETE", "FAIL", "WAITING"]
    rerun = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0 and "left running" not in rerun.stderr, rerun.stderr[-2000:]
    assert _configurations(_trials_on_disk(_sqlite(results))) == uninterrupted


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    return [p for p in parent.children(recursive=True) if "cse_kit.tune" in " ".join(p.cmdline())]


def test_sigterm_to_a_workers_parent_stops_its_workers_and_a_killed_worker_is_named_killed(data_dir, tmp_path):
    """`--workers 2`: kill -9 of one worker is reported as `killed by SIGKILL` (not exit 0); SIGTERM to the parent
    then stops the other worker too (none goes on unseen) in one line, and nothing is left RUNNING but the killed
    worker's trial, which the rerun takes up at once."""
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 6, "--workers", "2")
    process = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(process.pid)
    _wait_for(lambda: len(_workers(parent)) == 2, what="two workers")
    killed, other = _workers(parent)
    _wait_for(lambda: any((results / "runs").glob("*")), what="a trial's run")
    killed.kill()
    killed.wait(30)
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, err[-2000:]
    assert not other.is_running() or other.status() == psutil.STATUS_ZOMBIE
    lines = _lines(err)
    assert lines[-1].startswith("cse-kit: stopped by SIGTERM") and "continue the study" in lines[-1], lines
    running = [t for t in _trials_on_disk(_sqlite(results)) if t.state.name == "RUNNING"]
    assert len(running) <= 1  # the killed worker's, if it held one: its lock is free

    rerun = kit_process.run(_argv(results, data_dir, 6), env=ENV, capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "RUNNING" not in _states(_trials_on_disk(_sqlite(results)))
    assert sum(s == "COMPLETE" for s in _states(_trials_on_disk(_sqlite(results)))) == 6


def test_a_killed_worker_is_reported_killed_with_its_signal(data_dir, tmp_path):
    """`--workers 2`, one worker killed with kill -9: "1 of 2 workers stopped early (pid N killed by SIGKILL)"."""
    results = tmp_path / "results"
    process = kit_process.popen(_argv(results, data_dir, 2, "--workers", "2"), env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(process.pid)
    _wait_for(lambda: len(_workers(parent)) == 2, what="two workers")
    victim = _workers(parent)[0]
    victim.kill()
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-2000:]
    assert f"1 of 2 workers stopped early (pid {victim.pid} killed by SIGKILL)" in out, out + err[-2000:]


def test_a_stopped_worker_holding_its_trial_lock_is_not_failed_by_the_heartbeat(data_dir, tmp_path):
    """A worker stopped (SIGSTOP) for longer than the heartbeat's grace (1 s beats, 4 s grace) while a second
    command waits on the study: its trial is not failed, as its trial lock is held; on SIGCONT both commands end
    well and the study holds its total, none failed."""
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 2, "--heartbeat", "1")
    first = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _when_a_trial_trains(first, results, 1)
    first.send_signal(signal.SIGSTOP)
    try:
        second = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4 * 1 + 6)  # past the grace period
        assert second.poll() is None
        assert _states(_trials_on_disk(_sqlite(results))) == ["COMPLETE", "RUNNING"]
    finally:
        first.send_signal(signal.SIGCONT)
    for process in (first, second):
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
    assert "waiting for trial 1 (pid" in err
    assert _states(_trials_on_disk(_sqlite(results))) == ["COMPLETE", "COMPLETE"]


def test_trials_that_fail_on_their_own_stop_the_worker_after_k_in_a_row(data_dir, tmp_path):
    """Every trial's run diverges (lr=1e30: the loss is nan at step 2): each is recorded failed with its error and
    said in a line, and the worker stops after --failures-in-a-row 2 in one line, not drawing for ever."""
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 6, "--failures-in-a-row", "2", "--set", "lr=1e30")
    argv[argv.index(SPACE)] = "temp=(0.03,0.1)"
    done = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = _lines(done.stderr)
    assert [line.split(":")[0] for line in lines if "NonFiniteLoss" in line] == ["trial 0 failed", "trial 1 failed",
                                                                               "cse-kit"], lines
    assert lines[-1].startswith("cse-kit: error: 2 trials failed in a row (the last, trial 1: NonFiniteLoss"), lines
    trials = _trials_on_disk(_sqlite(results))
    assert _states(trials) == ["FAIL", "FAIL"] and all("error" in t.user_attrs for t in trials)


def test_what_a_stopped_trial_kept_names_its_checkpoint_where_the_loop_writes_it(data_dir, tmp_path):
    """The line of a storage that stayed away: a trial whose run has a checkpoint (in the folder the training loop
    writes, `checkpoint/`) "keeps its last checkpoint"; one with none "had trained nothing yet"."""
    from cse_kit.train.loop import CHECKPOINT

    study = _study(tmp_path, data_dir)
    store = study.store()
    key = store.key(study.config({"lr": 3e-5, "temp": 0.05}))
    assert "had trained nothing yet" in tuning.what_is_kept(store, key, 2, "the storage answers")
    (store.run_dir(key) / CHECKPOINT).mkdir(parents=True)
    assert CHECKPOINT == "checkpoint" and tuning.what_is_kept(store, key, 2, "the storage answers") == (
        f"trial 2's run keeps its last checkpoint ({store.run_dir(key)}): run the same command again when the storage "
        "answers, and it resumes from there")
