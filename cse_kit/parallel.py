"""Many runs at once: the pending runs of a table go to N worker processes, one per GPU of this machine or one job
each on a SLURM cluster, through submitit (one API for local processes and SLURM, a pure-Python package with no
daemon to run; Ray would need its own cluster runtime for what is a list of independent jobs).

The results store is the rendezvous. Each worker walks the same list of runs: a run whose key another process has
locked is passed over at first and waited for at the end (then reused, or, if that process died, resumed from its
checkpoint: the OS drops a dead process's file lock). So no run is trained twice, a finished record is only read,
and a run is done as long as one worker survives; whatever is still missing afterwards is computed in the calling
process as without workers.

`cse-kit report --workers N` sets CSE_KIT_WORKERS (and CSE_KIT_CLUSTER) for the notebooks it executes; a notebook
run by hand takes the same variables."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from filelock import Timeout

from .results import Pretrained, ResultStore
from .train.config import TrainConfig

WORKERS_ENV = "CSE_KIT_WORKERS"
CLUSTER_ENV = "CSE_KIT_CLUSTER"
#: JSON object of extra submitit parameters, e.g. {"slurm_partition": "gpu", "timeout_min": 600}
EXECUTOR_PARAMS_ENV = "CSE_KIT_EXECUTOR_PARAMS"
CLUSTERS = ("local", "slurm")

Task = tuple[TrainConfig | Pretrained, tuple[str, ...]]


def settings() -> tuple[int, str]:
    """(workers, cluster) from the environment: 1 worker (no parallelism) unless CSE_KIT_WORKERS is set."""
    text = os.environ.get(WORKERS_ENV, "1")
    try:
        workers = int(text)
    except ValueError:
        raise ValueError(f"{WORKERS_ENV} must be a whole number of workers, got {text!r}") from None
    cluster = os.environ.get(CLUSTER_ENV, "local")
    if workers < 1 or cluster not in CLUSTERS:
        raise ValueError(f"{WORKERS_ENV} must be >= 1 and {CLUSTER_ENV} one of {', '.join(CLUSTERS)}; "
                         f"got {workers} and {cluster!r}")
    return workers, cluster


def executor_params() -> dict:
    """The extra submitit parameters of $CSE_KIT_EXECUTOR_PARAMS (a JSON object), or a ValueError naming it."""
    text = os.environ.get(EXECUTOR_PARAMS_ENV, "{}")
    try:
        params = json.loads(text)
    except json.JSONDecodeError:
        params = None
    if not isinstance(params, dict):
        raise ValueError(f"{EXECUTOR_PARAMS_ENV} must be a JSON object, e.g. '{{\"slurm_partition\": \"gpu\"}}' "
                         f"(names and text in double quotes), got {text!r}")
    return params


def drain(results_dir: str, data_dir: str, tasks: list[Task]) -> list[str]:
    """One worker: compute every task no other process is computing, then wait for (reuse or resume) the others.
    Returns the keys this worker computed or completed."""
    store = ResultStore(results_dir, data_dir)
    done, deferred = [], []
    for subject, evals in tasks:
        if store.has(subject, evals):
            continue
        lock = store.lock(store.key(subject))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            deferred.append((subject, evals))
            continue
        try:
            store.get(subject, evals)  # the lock is re-entrant
            done.append(store.key(subject))
        finally:
            lock.release()
    for subject, evals in deferred:
        lock = store.lock(store.key(subject))
        print(f"waiting for run {store.key(subject)}: another process holds {lock.lock_file}", file=sys.stderr,
              flush=True)
        with lock:
            if not store.has(subject, evals):  # the holder died or was asked for fewer evaluations
                store.get(subject, evals)  # a dead holder's run resumes from its checkpoint
                done.append(store.key(subject))
    return done


def _executors(folder: Path, workers: int, cluster: str) -> list:
    """One submitit executor per worker: locally each pinned to one GPU (round robin) when there are GPUs."""
    import submitit
    import torch

    params = executor_params()
    if cluster == "slurm":
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(**{"gpus_per_node": 1, "tasks_per_node": 1, "timeout_min": 24 * 60, **params})
        return [executor] * workers
    gpus = torch.cuda.device_count()
    out = []
    for i in range(workers):
        executor = submitit.LocalExecutor(folder=folder)
        gpu = {"gpus_per_node": 1, "visible_gpus": [i % gpus]} if gpus else {}
        executor.update_parameters(**{"timeout_min": 24 * 60, **gpu, **params})
        out.append(executor)
    return out


def compute_all(store: ResultStore, tasks: list[Task], workers: int, cluster: str = "local", log=print) -> list[str]:
    """Compute the pending tasks with `workers` worker jobs and wait for them. Returns the keys computed. A worker
    that fails is reported (its log named) and its runs are left to the others and then to the caller."""
    pending = [(subject, tuple(evals)) for subject, evals in tasks if not store.has(subject, evals)]
    if workers <= 1 or len(pending) <= 1:
        return []
    n = min(workers, len(pending))
    folder = store.root / "jobs"
    log(f"{len(pending)} runs pending: {n} workers ({cluster}); logs in {folder}")
    # each worker starts at another place in the list, so they claim different runs first
    starts = [i * len(pending) // n for i in range(n)]
    jobs = [executor.submit(drain, str(store.root), store.data_dir, pending[start:] + pending[:start])
            for start, executor in zip(starts, _executors(folder, n, cluster))]
    computed = []
    for job in jobs:
        try:
            computed += job.result()
        except Exception as err:  # the runs it held are resumed by the others or the caller
            warnings.warn(f"worker {job.job_id} failed ({type(err).__name__}: {str(err).strip()[-500:]}); log: "
                          f"{job.paths.stderr}", stacklevel=2)
    log(f"workers computed {len(computed)} of {len(pending)} runs")
    return computed
