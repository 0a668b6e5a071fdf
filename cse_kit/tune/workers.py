"""A study run to its total by workers: this process, local processes (`python -m cse_kit.tune`), or SLURM jobs sent
as the report's are; a signal to the command passed to its workers, and a worker killed named with its signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, replace

from ..methods.registry import check_sendable
from ..results import parallel
from .study import Study, check, load, summary
from .trials import say_line, work

def run(study: Study, workers: int = 1, cluster: str = "local", say=print, optuna_study=None) -> list[dict]:
    """The study to its total with `workers` local processes (1: this one) or SLURM jobs; its trials, as summary()
    gives them. No worker starts where every trial has finished. `optuna_study`: the study as the command loaded it
    (checked and loaded here where None): created once, before the workers race to create it."""
    optuna_study = optuna_study or load(study, check(study))
    needed = min(workers, unfinished(study, optuna_study))
    if needed and cluster == "slurm":
        slurm_workers(study, needed, say)
    elif needed == 1:
        work(study, optuna_study=optuna_study)
    elif needed:
        local_workers(study, needed, say)
    return summary(study, optuna_study)


def unfinished(study: Study, optuna_study) -> int:
    """How many trials of the total have no outcome yet (to run, running, or a dead worker's to run again)."""
    from optuna.trial import TrialState

    return study.trials - len(optuna_study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def local_workers(study: Study, workers: int, say) -> None:
    """`workers` local processes on the study, each in its own session: a signal to this command (Ctrl-C, SIGTERM)
    is passed to each as SIGTERM, and the command waits for them to hand their trials back before it stops."""
    spec = json.dumps({**asdict(study), "space": [asdict(d) for d in study.space]})
    procs = [subprocess.Popen([sys.executable, "-m", "cse_kit.tune", spec], start_new_session=True)
             for _ in range(workers)]
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        _stop_workers(procs)
        raise
    stopped = [f"pid {p.pid} {_ended(code)}" for p, code in zip(procs, codes) if code]
    if stopped:
        say(f"{len(stopped)} of {workers} workers stopped early ({', '.join(stopped)}); rerun the same command to "
            "finish the study")


def _ended(code: int) -> str:
    """How a worker process ended: `exit N`, or `killed by SIGNAME` (Popen's negative return code)."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def _stop_workers(procs: list, grace: float = 60.0) -> None:
    """SIGTERM to each worker still running, then wait for each to hand its trial back (SIGKILL after `grace` s)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def slurm_workers(study: Study, workers: int, say) -> None:
    """`workers` SLURM jobs on the study, sent as the report's worker jobs are (submitit, cse_kit.results.parallel:
    $CSE_KIT_EXECUTOR_PARAMS, the private jobs folder, a GPU only for the paper profile). Each job is the study's
    worker (work) with the store and storage resolved here: a node may have another working directory and
    environment. A job that fails leaves its trial to the heartbeat and to a rerun."""
    base = study.config({})
    check_sendable(base.method)  # a notebook's own method cannot train in a job
    sent = sent_to_jobs(study)
    folder = parallel.jobs_dir(sent.results_dir)
    jobs = [executor.submit(work, sent)
            for executor in parallel.executors(folder, workers, "slurm", parallel.job_resources([(base, ())]))]
    say(f"study {study.name}: {workers} SLURM jobs ({', '.join(j.job_id for j in jobs)}); logs in {folder}")
    ended = parallel.wait_quietly(jobs)
    failed = [job for job in jobs if job not in ended or not _answered(job)]
    if failed:
        say(f"{len(failed)} of {workers} jobs ended without finishing (log: {failed[0].paths.stderr}); rerun the "
            "same command to finish the study")


def sent_to_jobs(study: Study) -> Study:
    """The study as SLURM jobs get it: the store and storage resolved here (a node may have another working
    directory and environment), and the trials' precision resolved for the jobs' device as the report's workers
    resolve theirs (parallel.for_workers): every trial, wherever it trains, is the run the submitter keys, so the
    chosen configuration's seeds (chosen_on_test) find the winning trial's run. Its name is the study's."""
    store, base = study.store(), study.config({})
    precision = parallel.for_workers(base, "slurm").mixed_precision
    resolved = [f"mixed_precision={precision}"] if precision != base.mixed_precision else []
    return replace(study, results_dir=str(store.root), data_dir=str(store.data_dir), storage=study.storage_url(),
                   overrides=[*study.overrides, *resolved])


def _answered(job) -> bool:
    try:
        job.result()
        return True
    except Exception:  # a job's own failure: its log says why
        return False


def _interrupted(signum, frame):
    for s in (signal.SIGTERM, signal.SIGINT):  # one stop: handing the trial back is not interrupted again
        signal.signal(s, signal.SIG_IGN)
    raise KeyboardInterrupt


def worker_main(argv: list[str]) -> int:
    """A worker process of run() (`python -m cse_kit.tune SPEC`): the study's trials until it holds its total; a
    signal hands its trial back; exit 128+SIGTERM on a signal, 2 with one line where the study stops."""
    spec = json.loads(argv[0])
    spec["heartbeat"] = tuple(spec["heartbeat"])
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupted)
    try:
        work(Study(**spec))
    except KeyboardInterrupt:  # its trial handed back; the command that started it says so
        return 128 + signal.SIGTERM
    except ValueError as error:  # the storage away, full or damaged, a study stopped or refused: one line
        say_line(f"cse-kit tune worker: {error}")
        return 2
    return 0
