"""The parallel runner: several local worker processes (submitit) share one results store through its locks."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from cse_kit import experiments as ex
from cse_kit.results import parallel
from cse_kit.results import Pretrained, ResultStore
from cse_kit.train.presets import build_config

import forked_python
import kit_process


def _runs(seeds):
    return [build_config("simcse-bert", "smoke", {"seed": seed, "max_steps": 2, "eval_steps": 2}) for seed in seeds]


def test_two_workers_train_each_pending_run_once_and_the_table_then_only_reads(data_dir, tmp_path, monkeypatch):
    store = ResultStore(tmp_path / "results", data_dir)
    subjects = _runs([1, 2, 3])
    store.get(subjects[0], ("sts_dev",))  # already finished: no worker touches it
    first = store.record_path(store.key(subjects[0])).read_text()
    computed = parallel.compute_all(store, [(s, ("sts_dev",)) for s in subjects], workers=2, log=lambda *a: None)
    assert sorted(computed) == sorted(store.key(s) for s in subjects[1:])  # each once, over both workers
    assert store.record_path(store.key(subjects[0])).read_text() == first  # a finished record is never rewritten
    for s in subjects[1:]:
        record = json.loads(store.record_path(store.key(s)).read_text())
        steps = [r["step"] for r in record["train_curve"]]
        assert steps == sorted(set(steps)) and record["train"]["steps"] == 2  # curves written once, in order
        # the two CPU workers share the cores out, or each one's kernels would wait for the other's threads
        assert record["environment"]["torch_threads"] == max(1, (os.cpu_count() or 1) // 2)
    logs = sorted(parallel.jobs_dir(tmp_path / "results").glob("*_log.out"))
    assert len(logs) == 2  # two worker processes ran
    assert not (tmp_path / "results" / "jobs").exists()  # submitit's pickles are never in the store

    # a notebook's rows with CSE_KIT_WORKERS set: everything is in the store, so nothing is submitted again
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    s = ex.setup("smoke", seeds=[2, 3], data_dir=str(data_dir), results_dir=str(tmp_path / "results"))
    assert s.workers == 2
    table = ex.run_rows([ex.Row("SimCSE", "simcse-bert", {"max_steps": 2, "eval_steps": 2})], s, ("sts_dev",),
                        ex.dev_columns)
    assert list(table["status"]) == ["ok", "ok"]
    assert len(list(parallel.jobs_dir(tmp_path / "results").glob("*_log.out"))) == 2


@pytest.mark.slow
def test_a_run_held_by_a_process_that_dies_is_taken_over_by_a_worker(data_dir, tmp_path):
    store = ResultStore(tmp_path / "results", data_dir)
    held, free = Pretrained("smoke-bert", "cls_before_pooler", "smoke"), Pretrained("smoke-bert", "avg", "smoke")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom cse_kit.results import ResultStore, Pretrained\n"
         f"s = ResultStore({str(tmp_path / 'results')!r}, {str(data_dir)!r})\n"
         "s.lock(s.key(Pretrained('smoke-bert', 'cls_before_pooler', 'smoke'))).acquire()\n"
         "print('held', flush=True)\ntime.sleep(600)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    # the holder dies (kill -9) once the workers are past their first walk over the runs
    killer = threading.Timer(20, holder.send_signal, (signal.SIGKILL,))
    killer.start()
    start = time.perf_counter()
    try:
        computed = parallel.compute_all(store, [(held, ("sts_dev",)), (free, ("sts_dev",))], workers=2,
                                        log=lambda *a: None)
    finally:
        killer.cancel()
        holder.kill()
    assert time.perf_counter() - start >= 20  # it was waited for, not skipped
    assert sorted(computed) == sorted([store.key(held), store.key(free)])
    assert store.has(held, ("sts_dev",)) and store.has(free, ("sts_dev",))
    waited = "".join(p.read_text() for p in parallel.jobs_dir(tmp_path / "results").glob("*_log.err"))
    assert f"waiting for run {store.key(held)}: another process holds" in waited


def test_worker_settings_are_checked(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "two")
    with pytest.raises(ValueError, match="CSE_KIT_WORKERS must be a whole number"):
        parallel.settings()
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    monkeypatch.setenv(parallel.CLUSTER_ENV, "ray")
    with pytest.raises(ValueError, match="CSE_KIT_CLUSTER one of local, slurm"):
        parallel.settings()


def test_the_jobs_folder_is_private_per_user_and_outside_the_store(tmp_path, monkeypatch):
    """submitit's job files are pickles a worker unpickles: their folder is in the user's cache, one per store, mode
    0700; one that others may write is refused in one line, by the report before any notebook runs."""
    monkeypatch.delenv(parallel.JOBS_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    store = tmp_path / "lab" / "results"
    store.mkdir(parents=True)
    folder = parallel.jobs_dir(store)
    assert folder.parent == tmp_path / "cache" / "cse-kit" / "jobs" and not folder.is_relative_to(store)
    assert folder.stat().st_mode & 0o777 == 0o700
    monkeypatch.chdir(tmp_path / "lab")
    assert parallel.jobs_dir("results") == folder and parallel.jobs_dir(tmp_path / "other") != folder
    folder.chmod(0o770)
    with pytest.raises(ValueError, match=f"the jobs folder {folder} is writable by its group or others"):
        parallel.jobs_dir(store)

    monkeypatch.setenv(parallel.JOBS_DIR_ENV, str(folder))
    done = kit_process.run(["report", "--profile", "smoke", "--workers", "2",
                            "--results-dir", str(store), "--out", str(tmp_path / "page")], capture_output=True,
                           text=True)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"run `chmod 700 {folder}`" in done.stderr and parallel.JOBS_DIR_ENV in done.stderr
    assert not (tmp_path / "page").exists()


def test_force_with_workers_is_refused_in_one_line(data_dir, tmp_path, monkeypatch):
    """force=True recomputes in the notebook's own kernel: with workers asked for it would train there, unasked."""
    monkeypatch.setenv(parallel.CLUSTER_ENV, "slurm")
    with pytest.raises(ex.ParameterError, match="force=True recomputes every run in this kernel") as refused:
        ex.setup("smoke", data_dir=str(data_dir), results_dir=str(tmp_path / "results"), force=True)
    assert "\n" not in str(refused.value) and "unset them" in str(refused.value)


def _preemptible_runs(seeds):
    """Runs long enough to be interrupted mid-training (16 steps, a checkpoint only where a stop asks for one)."""
    return [build_config("simcse-bert", "smoke", {"seed": seed, "max_examples": 256, "eval_steps": 8})
            for seed in seeds]


def interrupt_mid_training(store, sends: list, timeout=300):
    """[(subject, send)]: once subject's run has logged step 4 of 16, `send(job_id)` to the worker job training it."""
    jobs, waiting = parallel.jobs_dir(store.root), list(sends)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for subject, send in list(waiting):
            run = store.run_dir(store.key(subject))
            log = run / "log.jsonl"
            if log.is_file() and any(json.loads(line)["step"] >= 4 for line in log.read_text().splitlines() if line):
                [job] = [p.name.split("_")[0] for p in jobs.glob("*_log.out") if f"output {run}" in p.read_text()]
                send(job)
                waiting.remove((subject, send))
        time.sleep(0.05)
    assert not waiting, f"{len(waiting)} run(s) never reached step 4"


def assert_trained_once_and_resumed(store, subjects, interrupted, reference):
    """Every run started fresh once (the workers' logs), the interrupted one resumed from a checkpoint after step 0,
    and it ended bit-identical to the same run trained without interruption in `reference`."""
    logs = "".join(p.read_text() for p in parallel.jobs_dir(store.root).glob("*_log.out"))
    for subject in subjects:
        assert logs.count(f"; fresh; output {store.run_dir(store.key(subject))}") == 1, logs
    run = store.run_dir(store.key(interrupted))
    resumed = [int(m) for m in re.findall(rf"resuming at step (\d+); output {re.escape(str(run))}", logs)]
    assert resumed and min(resumed) >= 4, logs
    expected = reference.get(interrupted, ("sts_dev",))
    record = json.loads(store.record_path(store.key(interrupted)).read_text())
    assert record["metrics"] == expected["metrics"] and record["train_curve"] == expected["train_curve"]
    weights = "model/model.safetensors"
    assert (run / weights).read_bytes() == (reference.run_dir(store.key(interrupted)) / weights).read_bytes()


def _compute_in_background(store, subjects, **kwargs):
    computed = []
    thread = threading.Thread(target=lambda: computed.extend(parallel.compute_all(
        store, [(s, ("sts_dev",)) for s in subjects], workers=2, log=lambda *a: None, **kwargs)))
    thread.start()
    return thread, computed


@pytest.mark.slow  # the same pre-emption path as tests/test_slurm.py's requeue test, which runs by default
def test_a_local_worker_sent_sigterm_checkpoints_requeues_and_its_run_resumes_bit_exactly(data_dir, tmp_path):
    """SIGTERM to a worker (what SLURM sends at pre-emption): its run saves a checkpoint after the current step, the
    job restarts (submitit's local requeue) and resumes the run there; nothing is trained twice."""
    store = ResultStore(tmp_path / "results", data_dir)
    subjects = _preemptible_runs([1, 2])
    thread, computed = _compute_in_background(store, subjects)

    def terminate(job):  # the local job id is its controller's pid; the worker is the controller's child
        [worker] = psutil.Process(int(job)).children()
        worker.send_signal(signal.SIGTERM)

    interrupt_mid_training(store, [(subjects[0], terminate)])
    thread.join(timeout=600)
    assert sorted(computed) == sorted(store.key(s) for s in subjects)
    assert "SIGTERM: " in "".join(p.read_text() for p in parallel.jobs_dir(store.root).glob("*_log.err"))
    assert_trained_once_and_resumed(store, subjects, subjects[0], ResultStore(tmp_path / "reference", data_dir))


@pytest.mark.parametrize("how", ["SIGTERM", pytest.param("Ctrl-C", marks=pytest.mark.slow)])  # one handler for both
def test_stopping_the_report_stops_its_kernels_and_workers_in_one_line(how, data_dir, tmp_path):
    """SIGTERM to `cse-kit report --workers 2`, or Ctrl-C (SIGINT to the terminal's process group; the kernels are in
    sessions of their own), while its workers train: no process it started outlives it, and it says so in one line.
    With two notebooks they run in a pool of worker processes, with one in the report's own process. Its kernels are
    real processes (the tree it checks is the report's descendants, the workers its kernels start among them)."""
    results = tmp_path / "results"
    notebooks = ["figure2_cosine", "table12_14_hparams"] if how == "SIGTERM" else ["figure2_cosine"]
    report = kit_process.popen(["report", "--profile", "smoke", "--only",
                                *notebooks, "--workers", "2", "--data-dir", str(data_dir), "--results-dir",
                                str(results), "--out", str(tmp_path / "page")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "TQDM_DISABLE": "1", forked_python.REAL: "1"})
    deadline = time.monotonic() + 300
    while not list(results.glob("runs/*/log.jsonl")) and time.monotonic() < deadline and report.poll() is None:
        time.sleep(0.1)
    tree = psutil.Process(report.pid).children(recursive=True)
    try:
        assert any("submitit.core._submit" in p.cmdline() for p in tree), "no worker was training"
        if how == "SIGTERM":
            report.send_signal(signal.SIGTERM)
        else:
            os.killpg(report.pid, signal.SIGINT)
        out, err = report.communicate(timeout=120)
    finally:  # whatever the outcome, nothing of it is left running
        if report.poll() is None:
            report.kill()
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert report.returncode == 130
    assert [line for line in err.splitlines() if line.strip()] == [
        "cse-kit: interrupted; nothing half-written is kept. Rerun the same command to resume."], err
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


def _vote(rank: int, port: int, asks: dict, out: str) -> None:
    """One process of a gloo group of 2: asks[rank] = {step: signal} it receives; writes each step's vote."""
    import torch.distributed as dist

    from cse_kit.train import preemption

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    vote, votes = preemption.StopVote(2), []
    for step in range(1, 6):
        if step in asks[rank]:
            preemption.stop_after_this_step(asks[rank][step])
        votes.append(preemption._stopped_by[-1] if vote.agreed() else 0)
    dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(votes, f)


def test_the_processes_of_a_run_stop_after_the_same_step_for_the_signal_one_of_them_received(tmp_path):
    """A signal that reaches one process only stops every process after that step; SIGTERM outranks SIGUSR2."""
    import torch.multiprocessing as mp

    usr2, term = int(signal.SIGUSR2), int(signal.SIGTERM)
    asks = {0: {4: usr2}, 1: {2: usr2, 4: term}}
    mp.spawn(_vote, args=(29531, asks, str(tmp_path / "votes")), nprocs=2)
    votes = [json.loads((tmp_path / f"votes.{rank}").read_text()) for rank in (0, 1)]
    assert votes[0] == votes[1] == [0, usr2, 0, term, 0]
