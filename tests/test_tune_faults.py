"""`cse-kit tune` against the faults a lab's study meets, on real storages (SQLite, a PostgreSQL server started from
Debian's package), never mocks: the database stopped mid-trial, a worker killed, commands started at once on a new
storage, a damaged study file. Each time: one line, nothing lost, a rerun at once finishes the total, and the study's
configurations are those of an uninterrupted study of the same seed (docs/tuning.md, "When things go wrong")."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cse_kit import cli

import kit_process
from conftest import cli_env
from test_tune import _trials_in

SPACE = "lr=log(1e-5,1e-3); temp=(0.03,0.1)"
ENV = {**cli_env(), "TRANSFORMERS_VERBOSITY": "error"}


def _argv(results: Path, data_dir, trials: int, *more: str) -> list[str]:
    return ["tune", "--preset", "simcse-bert", "--profile", "smoke", "--trials", str(trials), "--space", SPACE,
            "--results-dir", str(results), "--data-dir", str(data_dir), *more]


def _sqlite(results: Path) -> str:
    return f"sqlite:///{results / 'studies.sqlite3'}"


def _configurations(trials: list) -> list[dict]:
    """The complete trials' parameters in the order they completed: the k-th configuration of the study."""
    done = sorted((t for t in trials if t.state.name == "COMPLETE"), key=lambda t: t.datetime_complete)
    return [t.params for t in done]


def _records(results: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (results / "records").glob("*.json")}


def _states(trials: list) -> list[str]:
    return [t.state.name for t in trials]


def _when(process: subprocess.Popen, done, what: str, timeout: float = 300) -> None:
    """Wait, with the command still running, until done() (watched on the file system: a smoke run trains in about
    a second, a read of the storage takes 0.2 s)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, process.communicate()
        if done():
            return
        time.sleep(0.01)
    raise AssertionError(f"{what} never happened")


def _when_a_trial_trains(process: subprocess.Popen, results: Path, number: int) -> None:
    """Wait until the run of trial `number` of a one-worker study trains: its run folder, the study's number+1-th,
    exists."""
    _when(process, lambda: sum(p.is_dir() for p in (results / "runs").glob("*")) > number,
          f"trial {number} training")


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory) -> list[dict]:
    """The configurations of a 4-trial study of seed 1 that nothing interrupted."""
    results = tmp_path_factory.mktemp("uninterrupted") / "results"
    assert cli.main(_argv(results, data_dir, 4)) == 0
    return _configurations(_trials_in(_sqlite(results)))


@pytest.fixture
def own_postgresql():
    """A PostgreSQL server of this test's own (it is stopped and started again: no other test shares it)."""
    import postgres_server

    why = postgres_server.missing()
    if why:
        pytest.skip(why)
    server = postgres_server.Server()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_a_worker_killed_mid_trial_is_run_again_at_once_and_the_study_draws_what_an_uninterrupted_one_draws(
        data_dir, tmp_path, uninterrupted):
    """`kill -9` of the command while trial 1 trains, on SQLite with the default heartbeat (30 s, grace 120 s): the
    same command at once fails the orphaned trial (its trial lock is free), runs its parameters again and finishes the
    total; none is left running, trial 0 is not retrained, and the configurations are the uninterrupted study's."""
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 4)
    process = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _when_a_trial_trains(process, results, 1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    kept = _records(results)
    assert len(kept) == 1  # trial 0's

    rerun = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "trial 1 was left running by pid" in rerun.stderr and "which is gone: it is run again" in rerun.stderr
    trials = _trials_in(_sqlite(results))
    assert sorted(_states(trials)) == ["COMPLETE"] * 4 + ["FAIL"]
    assert trials[1].state.name == "FAIL" and trials[2].params == trials[1].params  # run again at once, first
    assert _configurations(trials) == uninterrupted
    records = _records(results)
    assert len(records) == 4 and all(records[name] == mtime for name, mtime in kept.items())


def test_the_database_stopped_mid_trial_is_one_line_the_run_is_kept_and_a_rerun_finishes(
        own_postgresql, data_dir, tmp_path, uninterrupted):
    """PostgreSQL stopped (`pg_ctl stop -m immediate`) while trial 1 trains: the command waits --storage-patience
    seconds, then stops in one line (no traceback) naming the storage and saying trial 1's run is stored; the
    server started again, the same command at once finishes the total from the store (nothing retrained), none left
    running, the configurations the uninterrupted study's. A server back within the patience: nothing is said."""
    url = own_postgresql.database("tune_faults", "kit", "s3cret")
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 3, "--storage", url, "--storage-patience", "4")
    process = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _when_a_trial_trains(process, results, 1)
    own_postgresql.halt()
    out, err = process.communicate(timeout=300)
    assert process.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("cse-kit: error: the study's storage postgresql+psycopg://kit:***@127.0.0.1:")
    assert "stopped answering (OperationalError: " in lines[0] and "did not come back within 4 s" in lines[0]
    assert "exceeding max length" not in lines[0]  # Optuna's words around the driver's, misleading here
    assert "trial 1's run is stored" in lines[0] and "nothing retrained" in lines[0]
    kept = _records(results)
    assert len(kept) == 2

    own_postgresql.resume()
    rerun = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    trials = _trials_in(url)
    assert sorted(_states(trials)) == ["COMPLETE"] * 3 + ["FAIL"] and "RUNNING" not in _states(trials)
    assert _configurations(trials) == uninterrupted[:3]
    records = _records(results)
    assert len(records) == 3 and all(records[name] == mtime for name, mtime in kept.items())

    # the server away for less than the patience: the trial's bookkeeping waits, the study goes on
    argv = _argv(results, data_dir, 4, "--storage", url, "--storage-patience", "120")
    process = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _when_a_trial_trains(process, results, 3)
    own_postgresql.halt()
    time.sleep(3)
    own_postgresql.resume()
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0 and "Traceback" not in err, err
    assert sorted(_states(_trials_in(url))) == ["COMPLETE"] * 4 + ["FAIL"]
    assert _configurations(_trials_in(url)) == uninterrupted


def test_the_database_stopped_after_a_trials_first_checkpoint_is_said_kept_and_the_rerun_resumes_it_there(
        own_postgresql, data_dir, tmp_path):
    """PostgreSQL stopped once trial 0's run has written a checkpoint (in the loop's `checkpoint/`), under a pruner,
    so every dev score goes to the storage mid-run: the command stops in one line saying the run keeps its last
    checkpoint and resumes from there (issue 82: it looked for `checkpoints/` and said "had trained nothing yet");
    the server back, the same command resumes the run at that checkpoint's step and finishes the study."""
    from cse_kit.train.checkpoint import CHECKPOINT, STATE, checkpoint_step

    url = own_postgresql.database("tune_checkpoint", "kit", "s3cret")
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 1, "--storage", url, "--storage-patience", "2", "--prune", "--set",
                 "save_steps=2", "--set", "eval_steps=4", "--set", "epochs=3")
    process = kit_process.popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _when(process, lambda: any((run / CHECKPOINT / STATE).is_file() for run in (results / "runs").glob("*/")),
          "trial 0's first checkpoint")
    own_postgresql.halt()
    out, err = process.communicate(timeout=300)
    assert process.returncode == 2, err
    lines = [line for line in err.strip().splitlines() if not line.startswith("tokenizing")]  # a fresh data dir's
    assert len(lines) == 1 and "Traceback" not in err, err
    run = next((results / "runs").glob("*/"))  # the run's folder, not its lock file
    assert f"trial 0's run keeps its last checkpoint ({run}): run the same command again when the storage " \
           "answers, and it resumes from there" in lines[0]
    kept = checkpoint_step(run / CHECKPOINT)
    assert 2 <= kept < 24 and not (run / "summary.json").exists()

    log = run / "log.jsonl"  # each line marked: a resumed run keeps its lines up to the checkpoint, a new one not
    log.write_text("".join(json.dumps({**json.loads(line), "before the stop": True}) + "\n"
                           for line in log.read_text().splitlines()))

    own_postgresql.resume()
    rerun = kit_process.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    kept_lines = [e["step"] for e in logged if "before the stop" in e]
    assert kept_lines and kept_lines == [e["step"] for e in logged if e["step"] <= kept]  # resumed, not retrained
    assert [e["step"] for e in logged if "loss" in e] == list(range(2, 25, 2))  # no step twice, none missing
    trials = _trials_in(url)
    assert sorted(_states(trials)) == ["COMPLETE", "FAIL"] and trials[1].params == trials[0].params
    assert json.loads((run / "summary.json").read_text())["steps"] == 24


def _at_once(argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    processes = [kit_process.popen(a, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for a in argvs]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=600), *p.communicate()) for p in processes]


@pytest.mark.parametrize("commands", [2, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
def test_commands_started_at_once_on_a_new_storage_all_join_the_one_study(commands, storage, request, data_dir,
                                                                         tmp_path, uninterrupted):
    """K identical commands started at once on a storage none has created yet (a lab starting its workers): each
    exits 0 having printed the whole study, which holds exactly its total, complete, and TPE's random start-up draws
    are the configurations one worker draws (in the order the workers' timing gives)."""
    results = tmp_path / "results"
    url = _sqlite(results)
    if storage == "postgresql":
        url = request.getfixturevalue("postgresql").database(f"at_once_{commands}", f"lab{commands}", "s3cret")
    argv = _argv(results, data_dir, 4, *(["--storage", url] if storage == "postgresql" else []))
    done = _at_once([argv] * commands)
    for process in done:
        assert process.returncode == 0, process.stderr[-2000:]
        assert "4 trials" in process.stdout and " running " not in process.stdout, process.stdout
    trials = _trials_in(url)
    assert _states(trials) == ["COMPLETE"] * 4
    assert len({t.user_attrs["key"] for t in trials}) == 4 and len(_records(results)) == 4
    assert sorted(map(sorted, (t.params.items() for t in trials))) == \
        sorted(map(sorted, (c.items() for c in uninterrupted)))


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_damaged_study_file_is_one_line_saying_so_and_moved_aside_the_rerun_trains_nothing(damage, data_dir,
                                                                                          tmp_path, capsys):
    results = tmp_path / "results"
    argv = _argv(results, data_dir, 2)
    assert cli.main(argv) == 0
    before, configurations = _records(results), _configurations(_trials_in(_sqlite(results)))
    capsys.readouterr()
    path = results / "studies.sqlite3"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if damage == "truncated" else b"not a database " * 400)

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"cse-kit: error: the study file {path} is damaged ("), err
    assert f"`mv {path} {path}.damaged`" in err[0] and "only those the store lacks train" in err[0]

    path.rename(path.with_name(path.name + ".damaged"))
    assert cli.main(argv) == 0
    assert _records(results) == before  # every trial found its run in the store
    assert _configurations(_trials_in(_sqlite(results))) == configurations
