"""`cse-kit report --workers 2` under the faults `cse-kit train` is tested for (tests/test_write_failures.py): a worker
killed with kill -9 while it trains, locally and as a SLURM job, and the results store's disk full while the workers
write. Real processes (the report, its notebook's kernel, submitit's worker processes or SLURM jobs) and a real
tmpfs. Nothing stored is lost or half-written, the console says what happened in one line without a traceback, and a
rerun finishes, computing only what is missing."""

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from cse_kit.results import parallel
from cse_kit.results.records import check_record

import kit_process
from test_write_failures import NO_SPACE, fill, leftovers, small_disk  # noqa: F401  (small_disk: a fixture)

#: a notebook of two smoke runs (SimCSE and DiffCSE, 8 steps each), one for each of the two workers
NOTEBOOK = "figure2_cosine"
#: the runs of NOTEBOOK and the evaluation each record holds
RUNS, EVALUATION = 2, "geometry"


def start_report(data_dir, results: Path, page: Path, *extra: str) -> subprocess.Popen:
    return kit_process.popen(["report", "--profile", "smoke", "--only", NOTEBOOK,
                              "--workers", "2", *extra, "--data-dir", str(data_dir), "--results-dir", str(results),
                              "--out", str(page)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TQDM_DISABLE": "1"}, start_new_session=True)


def finish(report: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    """The report's (stdout, stderr) once it ends; past the timeout it is killed with every process it started."""
    try:
        return report.communicate(timeout=timeout)
    finally:
        if report.poll() is None:
            stop(report)


def stop(report: subprocess.Popen) -> None:
    with contextlib.suppress(psutil.Error):
        tree = psutil.Process(report.pid).children(recursive=True)
        report.kill()
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()


def console_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text and not re.search(r'File ".*", line \d+', text), text


def complete_records(results: Path) -> dict[str, dict]:
    """{key: record} of every record in the store, each checked whole (check_record: its digest, its key) and
    holding the notebook's evaluation."""
    found = {}
    for path in (results / "records").glob("*.json"):
        record = json.loads(path.read_text())
        check_record(record, path.stem)
        assert EVALUATION in record["metrics"], f"{path.name} lacks its evaluation"
        found[path.stem] = record
    return found


def fresh_starts(console: str, results: Path, key: str) -> int:
    """How often run `key` started training from step 0: in the workers' logs and on the report's console (a run
    the notebook's kernel trains itself)."""
    logs = "".join(p.read_text() for p in parallel.jobs_dir(results).glob("*_log.out"))
    return (logs + console).count(f"; fresh; output {results / 'runs' / key}\n")


def training_job(results: Path, deadline_s: float = 300) -> tuple[str, str]:
    """(key, job id) of the first run of the store to log a training step, with the worker job training it."""
    jobs, deadline = parallel.jobs_dir(results), time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for log in results.glob("runs/*/log.jsonl"):
            if '"step"' in log.read_text():
                run = log.parent
                held = [p.name.split("_")[0] for p in jobs.glob("*_log.out") if f"output {run}\n" in p.read_text()]
                if held:
                    return run.name, held[0]
        time.sleep(0.02)
    raise AssertionError("no worker started training")


def kill_9(processes: list[psutil.Process]) -> None:
    assert processes, "no worker process to kill"
    for process in processes:
        process.kill()


def assert_rerun_reuses_everything(data_dir, results: Path, page: Path, *extra: str) -> None:
    """The same command again: it exits 0, computes nothing (no job is sent) and leaves every record as it was."""
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (results / "records").glob("*.json")}
    logs = set(parallel.jobs_dir(results).glob("*_log.out"))
    out, err = finish(start_report(data_dir, results, page, *extra))
    assert console_lines(err) == [], err
    assert f"[1 of 1 finished] {NOTEBOOK}: " in out and "failed" not in out, out
    assert set(parallel.jobs_dir(results).glob("*_log.out")) == logs  # no worker was started
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (results / "records").glob("*.json")} == before


def local_worker(job: str) -> list[psutil.Process]:
    """The worker process of a local submitit job: the child of its controller, whose pid is the job's id."""
    return psutil.Process(int(job)).children()


def slurm_worker(job: str) -> list[psutil.Process]:
    """The worker process of SLURM job `job` (the Python task srun started on this one-node cluster's node)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            command = p.cmdline()
            if "submitit.core._submit" in command and Path(command[0]).name != "srun" and \
                    p.environ().get("SLURM_JOB_ID") == job:
                found.append(p)
    return found


#: (where the workers run, their processes, the reason the report gives for the killed one)
KILLED = {"local": ([], local_worker, "UncompletedJobError: it ended without a result: killed (kill -9, out of "
                                      "memory) or crashed"),
          "slurm": (["--cluster", "slurm"], slurm_worker, "RuntimeError: it left the queue without a result "
                                                          "(cancelled, or killed by its node)")}


@pytest.mark.slow  # the report twice: about 50 s locally, 60 s on SLURM, on 2 cores
@pytest.mark.parametrize("cluster", list(KILLED))
def test_a_worker_killed_mid_training_is_one_line_and_the_report_finishes_its_run(cluster, data_dir, tmp_path,
                                                                                   request):
    """kill -9 of a worker process while it trains, a local process or a SLURM job's: the other worker, which waits
    for the runs others hold, takes the run over (the OS drops the dead worker's lock) and the report ends as
    without the fault (exit 0), its console saying which worker failed and where its log is in one line. Nothing is
    stored twice; a rerun reuses everything."""
    extra, workers_of, why = KILLED[cluster]
    if cluster == "slurm":
        request.getfixturevalue("slurm")
    results, page = tmp_path / "results", tmp_path / "page"
    report = start_report(data_dir, results, page, *extra)
    try:
        killed, job = training_job(results)
        kill_9(workers_of(job))
    except BaseException:
        stop(report)
        raise
    out, err = finish(report)
    assert report.returncode == 0, out + err
    assert_no_traceback(out, err)
    assert console_lines(err) == [], err
    warned = [line for line in console_lines(out) if "UserWarning" in line]
    assert warned == [f"    {NOTEBOOK}: UserWarning: worker {job} failed ({why}); log: "
                      f"{parallel.jobs_dir(results) / f'{job}_0_log.err'}"], out
    records = complete_records(results)
    assert len(records) == RUNS and killed in records
    assert sorted(p.name for p in (results / "runs").iterdir() if p.is_dir()) == sorted(records)
    for key in records:  # the killed run started again once, unless it had finished training (then evaluated only)
        assert fresh_starts(out, results, key) in ((1, 2) if key == killed else (1,))
    assert "; fresh; output" not in out and "resuming at step" not in out  # by a worker, not the report's kernel
    assert leftovers(results) == []
    assert_rerun_reuses_everything(data_dir, results, page, *extra)


@pytest.mark.slow  # the report on the full disk's store, then the rerun: about 90 s on 2 cores
def test_a_full_disk_while_the_workers_write_is_one_line_and_the_rerun_trains_only_the_missing_run(
        small_disk, data_dir, tmp_path):  # noqa: F811  (the imported fixture)
    """The results store on a 20 MB tmpfs with room for one of the two runs' models (4.6 MB each): the worker that
    exports second, and every process that takes its run over, fails on the full disk. The report says it in the one
    line `cse-kit train` says it in (exit 2), keeps no half-written file or record; after space is freed, the same
    command trains the missing run only and finishes."""
    results, page = small_disk / "results", tmp_path / "page"
    filler = fill(small_disk, 6 << 20)
    report = start_report(data_dir, results, page)
    out, err = finish(report)
    assert report.returncode == 2, out + err
    assert_no_traceback(out, err)
    [line] = console_lines(err)
    assert re.fullmatch(rf"cse-kit: error: cannot write {re.escape(str(results))}/\S+: {NO_SPACE}; nothing "
                        r"half-written was kept\. Free space there \(or raise the file size limit, `ulimit -f`\) and "
                        "run the same command again: it resumes where it stopped", line), line
    for warned in (line for line in console_lines(out) if "UserWarning" in line):  # a failed worker: one line each
        assert re.fullmatch(rf"    {NOTEBOOK}: UserWarning: worker \d+ failed \(cse_kit\.io\.WriteFailed: cannot "
                            rf"write \S+: {NO_SPACE}; nothing half-written was kept\); log: \S+_log\.err", warned), out
    assert (page / "index.html").is_file()  # the page, on another disk, shows the notebook's failure
    assert "; fresh; output" not in out  # the notebook stopped on the workers' full disk, never trained it again
    survivors = complete_records(results)  # every record whole: the failed run has none, not a partial one
    assert len(survivors) < RUNS
    for run in (results / "runs").iterdir():
        if run.is_dir() and run.name not in survivors:
            assert not (run / "model").exists() and not (run / "summary.json").exists()
    assert leftovers(results) == []
    kept = {key: ((results / "records" / f"{key}.json").stat().st_mtime_ns,
                  (results / "runs" / key / "model" / "model.safetensors").stat().st_mtime_ns) for key in survivors}

    filler.unlink()
    before = {p.name: fresh_starts("", results, p.name) for p in (results / "runs").iterdir() if p.is_dir()}
    report = start_report(data_dir, results, page)
    rerun, err = finish(report)
    assert report.returncode == 0 and console_lines(err) == [], rerun + err
    assert f"{NOTEBOOK}: {RUNS} runs: {len(survivors)} finished, computing {RUNS - len(survivors)}" in rerun
    records = complete_records(results)
    assert len(records) == RUNS
    for key in records:  # a survivor is neither trained nor written again, a missing run trained once
        assert fresh_starts(rerun, results, key) - before.get(key, 0) == (0 if key in survivors else 1), rerun
        if key in survivors:
            assert kept[key] == ((results / "records" / f"{key}.json").stat().st_mtime_ns,
                                 (results / "runs" / key / "model" / "model.safetensors").stat().st_mtime_ns)
    assert leftovers(results) == []


def test_a_worker_failure_and_a_notebook_stopped_by_a_full_disk_are_each_one_line():
    """What the two tests above see, without their processes: a failed worker's warning is the exception that ended
    it (the last line of the traceback submitit wraps), never a piece of its log; a notebook's WriteFailed becomes
    the report's own, the line `cse-kit train` says."""
    import errno
    import traceback

    from submitit.core.utils import FailedJobError, UncompletedJobError

    from cse_kit.io import WriteFailed

    full = WriteFailed("/store/records/k.json", "No space left on device", errno.ENOSPC)
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise full from None
    except WriteFailed:
        trace = traceback.format_exc()
    failed = FailedJobError(f"Job (task=0) failed during processing with trace:\n----------------------\n{trace}\n"
                            "----------------------\nYou can check full logs with 'job.stderr(0)' and 'job.stdout(0)'"
                            "or at paths:\n  - /jobs/1_0_log.err\n  - /jobs/1_0_log.out")
    assert parallel.why_failed(failed) == f"cse_kit.io.WriteFailed: {full}"
    uncompleted = UncompletedJobError("Job 1 (task: 0) with path /jobs/1_0_result.pkl\nhas not produced any output "
                                      "(state: FINISHED)\nError stream produced:\n----\nsubmitit INFO (...) - Loading")
    assert parallel.why_failed(uncompleted) == ("UncompletedJobError: it ended without a result: killed (kill -9, out "
                                                "of memory) or crashed")
    assert parallel.why_failed(RuntimeError("it left the queue\nwithout a result")) == "RuntimeError: it left the queue"

    assert str(WriteFailed.said(parallel.why_failed(failed))) == str(full)  # a worker's, raised again by the caller
    again = WriteFailed.said(f"WriteFailed: {full}")  # a notebook's, raised again by the report
    assert isinstance(again, WriteFailed) and str(again) == str(full) and again.errno == errno.ENOSPC
    too_large = WriteFailed("/store/runs/k/model", "File too large (over the file size limit, `ulimit -f`)",
                            errno.EFBIG)
    assert WriteFailed.said(f"WriteFailed: {too_large}").errno == errno.EFBIG
    assert WriteFailed.said("ValueError: cannot write /x: No space left on device") is None
    assert WriteFailed.said("") is None
