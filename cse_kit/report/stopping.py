"""Stopping `cse-kit report` stops everything it started. Its processes form a tree the terminal does not reach:
notebooks run in worker processes, each notebook in a kernel that jupyter starts in its own session (a Ctrl-C in
the terminal never gets there), and a kernel with CSE_KIT_WORKERS starts the parallel runner's worker jobs. Killed
alone, the report left them to PID 1, training on."""

from __future__ import annotations

import contextlib
import signal

import psutil

#: a local submitit job's controller restarts its worker when the worker leaves to requeue (cse_kit.results.parallel)
LOCAL_CONTROLLER = "submitit.local._local"
#: multiprocessing's resource tracker ends with the report; stopped before, it is relaunched, with a traceback for
#: each semaphore it no longer knows
RESOURCE_TRACKER = "multiprocessing.resource_tracker"


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@contextlib.contextmanager
def stopping_together():
    """Within it Ctrl-C and SIGTERM first stop every process the report started (stop_descendants), then stop the
    report (KeyboardInterrupt). In that order: papermill, interrupted first, would interrupt its kernel, which
    passes the SIGINT to its process group, the workers' job controllers among them, each with a traceback."""
    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupted(signum, frame):
        for s in signals:  # a second Ctrl-C while they stop changes nothing
            signal.signal(s, signal.SIG_IGN)
        stop_descendants()
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupted) for s in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_descendants(grace_s: float = 30.0) -> None:
    """Stop every process this one started: local job controllers at once (else they restart their worker), then
    SIGTERM to the rest, so a worker saves its run's checkpoint after the current step; whatever is left after
    grace_s is killed. Nothing half-written is kept: every write is atomic."""
    # all of them before any ends and leaves its own children to PID 1
    processes = [p for p in _descendants() if not _runs(p, RESOURCE_TRACKER)]
    controllers = [p for p in processes if _runs(p, LOCAL_CONTROLLER)]
    others = [p for p in processes if p not in controllers]
    for group, sig in ((controllers, signal.SIGKILL), (others, signal.SIGTERM)):
        for p in group:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def _runs(process: psutil.Process, module: str) -> bool:
    try:
        return any(module in part for part in process.cmdline())
    except psutil.Error:
        return False
