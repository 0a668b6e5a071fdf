"""The notebooks of a report, one after another or `jobs` at once in worker processes (execute_all), the longest
first by their seconds in the profile's last measured report (longest_first, NOTEBOOK_SECONDS); how many at once
unless told (default_jobs)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from ..environment import threads_per_worker
from ..train.presets import sizing
from .checkout import NOTEBOOK_DIR
from .notebooks import execute, notebook_warnings


#: each notebook's seconds in a report of each profile from an empty store, measured by `bench/report_speed.py
#: --record` (longest_first)
NOTEBOOK_SECONDS = NOTEBOOK_DIR / "seconds.json"


def _outcome(run: dict, done: int, total: int, log) -> None:
    """The line that ends a notebook's part of the console, numbered as notebooks finish (the one numbering of the
    console: several notebooks at once finish in another order than they start), then the warnings it raised."""
    import nbformat

    log(f"[{done} of {total} finished] {run['name']}: {run['status']} ({run['seconds']:.0f} s)"
        f"{' ' + run['error'] if run['error'] else ''}")
    if run["status"] != "reused":
        for warning in notebook_warnings(nbformat.read(run["path"], as_version=4)):
            log(f"    {run['name']}: {warning}")


def _execute_in_worker(name: str, params: dict, executed_dir: Path, force: bool, lines) -> dict:
    """execute() in a worker process of execute_all, its console lines sent back to the parent through `lines`."""
    lines.put(("started", name))
    return execute(name, params, executed_dir, force, lambda line: lines.put(("line", line)))


def _start_worker(threads: int) -> None:
    """A worker of execute_all ignores Ctrl-C: cli.cmd_report stops it (cse_kit.report.stopping), else the pool's exit would
    wait for it. Its kernels share the cores with the other workers' (torch's threads, unless OMP_NUM_THREADS says)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def execute_all(names: list[str], params: dict, executed_dir: Path, force: bool = False, log=print,
                jobs: int = 1) -> list[dict]:
    """execute() each notebook, `jobs` at once (worker processes; the results store's locks make a notebook wait
    for a run another one is training, never train it twice), each one's progress lines to `log` as they come.
    Returns the runs in `names`' order."""
    total = len(names)
    if jobs <= 1 or total <= 1:
        runs = []
        for i, name in enumerate(names, 1):
            log(f"{name}: running ({total - i} notebook(s) not started)")
            runs.append(execute(name, params, executed_dir, force, log))
            _outcome(runs[-1], i, total, log)
        return runs
    import multiprocessing
    import queue
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch or kernel-client state
    finished, started = {}, 0
    order = longest_first(names, params["profile"])
    with context.Manager() as manager, ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                                                           initargs=(threads_per_worker(jobs),)) as pool:
        lines = manager.Queue()
        pending = {pool.submit(_execute_in_worker, name, params, executed_dir, force, lines) for name in order}
        log(f"{total} notebook(s), {min(jobs, total)} at once")
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            while True:
                try:
                    kind, text = lines.get_nowait()
                except queue.Empty:
                    break
                if kind == "started":
                    started += 1
                    log(f"{text}: running ({total - started} notebook(s) not started)")
                else:
                    log(text)
            for future in done:
                run = future.result()
                finished[run["name"]] = run
                _outcome(run, len(finished), total, log)
    return [finished[name] for name in names]


def longest_first(names: list[str], profile: str) -> list[str]:
    """names in the order their notebooks start when several run at once: the longest first (their seconds in the
    profile's last measured report, NOTEBOOK_SECONDS), so that no long notebook starts last and runs alone at the end
    (the smoke report's longest is a fifth of it). One not measured may be long: it starts first."""
    try:
        seconds = json.loads(NOTEBOOK_SECONDS.read_text()).get(profile, {})
    except FileNotFoundError:
        seconds = {}
    unmeasured = max(seconds.values(), default=0) + 1
    return sorted(names, key=lambda name: -seconds.get(name, unmeasured))


def default_jobs(profile: str) -> int:
    """Notebooks at once unless told: a smoke run's tiny models keep at most one core busy, so one per core up to 4
    (what that makes of the smoke report's time: docs/notebooks.md, measured by bench/report_speed.py); cpu and
    paper training use every core or the GPU: one."""
    return max(1, min(4, os.cpu_count() or 1)) if sizing(profile) == "smoke" else 1
