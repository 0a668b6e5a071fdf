"""Many runs at once: the pending runs of a table go to N worker processes, one per GPU of this machine or one job
each on a SLURM cluster, through submitit (one API for local processes and SLURM, a pure-Python package with no
daemon to run; Ray would need its own cluster runtime for what is a list of independent jobs).

The results store is the rendezvous. Each worker walks the same list of runs: a run whose key another process has
locked is passed over at first and waited for at the end (then reused, or, if that process died, resumed from its
checkpoint: the OS drops a dead process's file lock). So no run is trained twice, a finished record is only read,
and a run is done as long as one worker survives; whatever is still missing afterwards is computed in the calling
process as without workers.

A worker is pre-emptible (`Drain`): on SIGUSR2 (what submitit's `--signal` sends before the time limit, and
`scancel --signal=USR2`) or SIGTERM (SLURM's pre-emption, `scontrol requeue`, the time limit itself) its run in
training saves a checkpoint after the current step and the job requeues; the requeued job walks the same list,
finds finished runs finished and resumes that run from its checkpoint. On SLURM a SIGTERM only checkpoints and
exits: SLURM is then requeuing the job (pre-emption, `scontrol requeue`) or ending it (`scancel`, the time limit),
and requeuing it from inside would undo a `scancel`.

`cse-kit report --workers N` sets CSE_KIT_WORKERS (and CSE_KIT_CLUSTER) for the notebooks it executes; a notebook
run by hand takes the same variables. `--cluster slurm` alone is one worker job: on SLURM every pending run is a
job's, never trained on the machine that submits.

submitit's job files (the call a worker runs and its answer, pickles that submitit unpickles, and the jobs' logs)
go to jobs_dir, a folder only this user can write, never into the results store, which a lab may share.

submitit is imported only where worker jobs are sent or run (require_submitit): a machine that trains runs itself
(`cse-kit train`, a notebook without workers) needs no cluster package, and one that asks for workers without it is
told in one line to install it."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

from filelock import Timeout

from ..environment import threads_per_worker
from ..io import WriteFailed
from ..methods.registry import check_sendable
from ..train.config import TrainConfig
from ..train.precision import resolve_precision
from ..train.preemption import Preemption
from ..train.presets import sizing
from . import Pretrained, ResultStore

WORKERS_ENV = "CSE_KIT_WORKERS"
CLUSTER_ENV = "CSE_KIT_CLUSTER"
#: JSON object of extra submitit parameters, e.g. {"slurm_partition": "gpu", "timeout_min": 600}
EXECUTOR_PARAMS_ENV = "CSE_KIT_EXECUTOR_PARAMS"
#: the folder of submitit's job files, instead of the default under the user's cache (jobs_dir)
JOBS_DIR_ENV = "CSE_KIT_JOBS_DIR"
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


def uses_workers(workers: int, cluster: str) -> bool:
    """Whether pending runs go to worker jobs: on SLURM always (one job at least: a user who named the cluster
    expects jobs, not training on the machine the report runs on), locally from 2 workers on."""
    return cluster == "slurm" or workers > 1


def require_submitit():
    """The submitit module, or an ImportError saying in one line to install it: only worker jobs need it (local
    `--workers N` processes and `--cluster slurm` jobs), so `cse-kit train` and a run without workers never import
    it."""
    try:
        import submitit
    except ImportError as error:
        raise ImportError(f"worker jobs (--workers N, --cluster slurm) are sent through submitit, which this "
                          f"environment lacks ({error}): run `pip install submitit`, or train without workers") \
            from None
    return submitit


def executor_params() -> dict:
    """The extra submitit parameters of $CSE_KIT_EXECUTOR_PARAMS (a JSON object), or a ValueError naming it. What
    asks for them sends worker jobs, so it is also told here, in one line, where submitit is not installed
    (require_submitit: `cse-kit report` asks before any notebook runs)."""
    require_submitit()
    text = os.environ.get(EXECUTOR_PARAMS_ENV, "{}")
    try:
        params = json.loads(text)
    except json.JSONDecodeError:
        params = None
    if not isinstance(params, dict):
        raise ValueError(f"{EXECUTOR_PARAMS_ENV} must be a JSON object, e.g. '{{\"slurm_partition\": \"gpu\"}}' "
                         f"(names and text in double quotes), got {text!r}")
    return params


def jobs_dir(results_dir) -> Path:
    """The folder of submitit's job files for the results store at results_dir: $CSE_KIT_JOBS_DIR, else
    <$XDG_CACHE_HOME or ~/.cache>/cse-kit/jobs/<a digest of the store's absolute path> (a home folder, which a
    cluster's nodes mount). Created with mode 0700: a worker unpickles the call it finds there, so whoever could write
    there could run code as this user. A folder another user owns, or its group or others may write, is refused."""
    chosen = os.environ.get(JOBS_DIR_ENV)
    if chosen:
        folder = Path(chosen).expanduser().absolute()
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        store = hashlib.sha256(str(Path(results_dir).expanduser().resolve()).encode()).hexdigest()[:16]
        folder = cache / "cse-kit" / "jobs" / store
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    _check_private(folder)
    return folder


def _check_private(folder: Path) -> None:
    """A ValueError naming the fix unless only this user can write into folder."""
    found = folder.stat()
    why = (f"is owned by another user (uid {found.st_uid})" if found.st_uid != os.getuid() else
           f"is writable by its group or others (mode {found.st_mode & 0o777:o})" if found.st_mode & 0o022 else None)
    if why:
        raise ValueError(f"the jobs folder {folder} {why}: the worker jobs unpickle the files there, so whoever can "
                         f"write there can run code as you; run `chmod 700 {folder}` if it is yours, or set "
                         f"{JOBS_DIR_ENV} to a folder only you can write")


def drain(results_dir: str, data_dir: str, tasks: list[Task], amp: bool = False) -> list[str]:
    """One worker: compute every task no other process is computing, then wait for (reuse or resume) the others.
    Returns the keys this worker computed or completed. amp: the submitter's store's (a SLURM node may not share
    its environment)."""
    store = ResultStore(results_dir, data_dir, amp=amp)
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


class Drain:
    """drain() as a pre-emptible worker job: submitit calls checkpoint() (this same call again, as
    submitit.helpers.Checkpointable's; submitit asks for the method, not the class, so submitit is imported by the job
    only) and requeues the job; _Preemption decides when."""

    def checkpoint(self, *args, **kwargs):
        """The call to resubmit on requeue: this one, with its arguments."""
        return require_submitit().helpers.DelayedSubmission(self, *args, **kwargs)

    def __call__(self, results_dir: str, data_dir: str, tasks: list[Task], amp: bool = False,
                 threads: int | None = None) -> list[str]:
        from ..train.loop import TrainingStopped

        if threads:
            import torch

            torch.set_num_threads(threads)
        preemption = _Preemption()
        try:
            return drain(results_dir, data_dir, tasks, amp)
        except TrainingStopped as stopped:
            preemption.leave(f"{stopped}")


class _Preemption(Preemption):
    """The worker's SIGTERM and SIGUSR2 handler (train.preemption): a run in training stops after its current step
    with a checkpoint, Drain catches its TrainingStopped and leaves; at any other time (an evaluation, a wait for
    another worker's run) it leaves at once."""

    def __init__(self):
        JobEnvironment = require_submitit().JobEnvironment

        self.cluster = JobEnvironment().cluster
        self.requeue = signal.getsignal(JobEnvironment._usr_sig())  # submitit's checkpoint_and_try_requeue
        self.SIGNALS = (signal.SIGTERM, JobEnvironment._usr_sig())
        super().__init__()

    def leave(self, what: str) -> None:
        self.leaving = True
        signum = self.stopped_by
        name = signal.Signals(signum).name
        if signum == signal.SIGTERM and self.cluster == "slurm":
            print(f"{name}: {what}; SLURM requeues this job or ends it", file=sys.stderr, flush=True)
            sys.exit(-1)
        print(f"{name}: {what}; requeuing", file=sys.stderr, flush=True)
        self.requeue(signum, None)  # checkpoint() resubmits the call, requeues (locally: restarts), exits


def jobs_get_gpus(profile: str, cluster: str) -> bool | None:
    """Whether the worker jobs that train a profile's runs have a GPU: on SLURM the paper profile's do
    (job_resources), the others' do not; None for local workers, which run on this machine."""
    return profile == "paper" if cluster == "slurm" else None


def for_workers(subject: TrainConfig | Pretrained, cluster: str):
    """subject as its worker jobs are sent it. A SLURM job trains on another node than the submitter, which may
    resolve mixed_precision otherwise (a CPU login node, GPU or AMX workers), so a trained run's setting is sent
    resolved for the job's device (auto: bf16 on a GPU, on a CPU what the submitter's CPU resolves it to; fp16:
    fp32 on a CPU): the worker then trains in the precision the submitter's key says (ResultStore.cuda)."""
    if cluster != "slurm" or not isinstance(subject, TrainConfig):
        return subject
    return subject.replace(mixed_precision=resolve_precision(subject.mixed_precision,
                                                             jobs_get_gpus(subject.profile, cluster)))


def job_resources(tasks: list[Task]) -> dict:
    """What one SLURM worker job asks for: a GPU where its runs train on one (the paper profile), else CPUs: 1 for
    the smoke profile's tiny models, up to 8 for cpu runs. A cluster without GPUs refuses any GPU request, so cpu
    and smoke jobs make none."""
    if any(jobs_get_gpus(subject.profile, "slurm") for subject, _ in tasks):
        return {"gpus_per_node": 1}
    smoke = all(sizing(subject.profile) == "smoke" for subject, _ in tasks)
    return {"cpus_per_task": 1 if smoke else min(8, os.cpu_count() or 1)}


def worker_threads(workers: int, cluster: str) -> int | None:
    """torch threads per local CPU worker: the cores shared out (threads_per_worker; torch would give each worker
    every core). None on SLURM (each job has its own CPUs) and on GPUs (one worker per GPU)."""
    import torch

    if cluster != "local" or torch.cuda.is_available():
        return None
    return threads_per_worker(workers)


def executors(folder: Path, workers: int, cluster: str, resources: dict) -> list:
    """One submitit executor per worker: locally each pinned to one GPU (round robin) when there are GPUs."""
    import torch

    submitit = require_submitit()
    params = executor_params()
    if cluster == "slurm":
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(**{**resources, "tasks_per_node": 1, "timeout_min": 24 * 60, **params})
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
    if not pending or (cluster == "local" and (workers <= 1 or len(pending) <= 1)):
        return []
    for subject, _ in pending:  # a worker imports a researcher's method from its module, never from a notebook
        if isinstance(subject, TrainConfig):
            check_sendable(subject.method)
    n = min(workers, len(pending))
    folder = jobs_dir(store.root)
    log(f"{len(pending)} runs pending: {n} workers ({cluster}); logs in {folder}")
    # each worker starts at another place in the list, so they claim different runs first
    starts = [i * len(pending) // n for i in range(n)]
    jobs = [executor.submit(Drain(), str(store.root), store.data_dir, pending[start:] + pending[:start], store.amp,
                            worker_threads(n, cluster))
            for start, executor in zip(starts, executors(folder, n, cluster, job_resources(pending)))]
    ended = wait_quietly(jobs) if cluster == "slurm" else jobs
    full = None
    for job in jobs:
        try:
            if job not in ended:
                raise RuntimeError("it left the queue without a result (cancelled, or killed by its node)")
            job.result()
        except Exception as err:  # the runs it held are resumed by the others or the caller
            why = why_failed(err)
            warnings.warn(f"worker {job.job_id} failed ({why}); log: {job.paths.stderr}", stacklevel=2)
            full = full or WriteFailed.said(why)
    if full is not None:  # the caller would train the run again only to fill the same disk: say it now
        raise full
    # from the store, not the jobs' answers: a requeued job answers for its last part only
    computed = [store.key(subject) for subject, evals in pending if store.has(subject, evals)]
    log(f"workers computed {len(computed)} of {len(pending)} runs")
    return computed


def why_failed(err: Exception) -> str:
    """Why a worker job failed, in one line (the report shows a notebook's warnings line by line): the exception
    that ended it, from the traceback submitit's FailedJobError carries between its two rules; that it ended without
    a result (UncompletedJobError: its process was killed, kill -9 or out of memory, or crashed); else the error's
    first line. The job's log has the rest."""
    name = type(err).__name__
    if name == "UncompletedJobError":
        return f"{name}: it ended without a result: killed (kill -9, out of memory) or crashed"
    parts = str(err).split("\n----------------------\n")
    if name == "FailedJobError" and len(parts) == 3:
        lines = [line for line in parts[1].splitlines() if line.strip()]
        frames = [i for i, line in enumerate(lines) if line.startswith(" ")]  # "  File ...", its code, "^^^"
        raised = lines[frames[-1] + 1:] if frames else lines[-1:]
        if raised:
            return " ".join(line.strip() for line in raised)
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{name}: {first}" if first else name


def wait_quietly(jobs: list, poll_s: float = 1.0, queue_every_s: float = 10.0) -> list:
    """Wait for SLURM jobs; returns those that ended with a result. submitit's own wait asks SLURM's accounting
    (sacct) every few seconds and lets its complaints through, "Slurm accounting storage is disabled" once per poll
    where there is none: here each job's result file is watched, and squeue (no accounting needed) says when a job
    left the queue without one. A requeued job stays in the queue, so it is waited for."""
    waiting, last_queue_check = list(jobs), time.monotonic()
    while waiting:
        time.sleep(poll_s)
        waiting = [job for job in waiting if not job.paths.result_pickle.exists()]
        if waiting and time.monotonic() - last_queue_check >= queue_every_s:
            queued = _queued_job_ids()
            last_queue_check = time.monotonic()
            if queued is not None:
                waiting = [job for job in waiting if job.job_id in queued or job.paths.result_pickle.exists()]
    return [job for job in jobs if job.paths.result_pickle.exists()]


def _queued_job_ids() -> set[str] | None:
    """This user's jobs in the SLURM queue (pending, running, requeued), or None when squeue does not answer."""
    try:
        done = subprocess.run(["squeue", "--noheader", "--format=%i", f"--user={os.getuid()}"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(done.stdout.split()) if done.returncode == 0 else None
