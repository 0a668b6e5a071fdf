"""What the search itself costs a `cse-kit tune` trial (issue 69): the sampler, the storage and the bookkeeping beside
the trial's training, for SQLite (the default) and PostgreSQL (a lab's server).

  python bench/tune_overhead.py [--profiles smoke[,cpu]] [--trials 8] [--rounds 2] [--postgresql URL]
                                [--data-dir DIR]

Per profile, one study trains its trials into a fresh results store (SQLite storage): a trial's training time is its
run computed (worker_trials.run_trial: the run trained and its dev score read). Then, per storage, a study of the same
space, seed and budget under another name runs its worker (worker_trials.work) over that store: its trials draw the same
parameters, so each finds its run already stored and nothing trains; what it spends is the search's own cost, timed
in its parts: next_trial (the lock, stale-trial check, sampler, ask), the run lookup (run_trial on a stored run: the
store reads its record, and the trial's three attributes are written to the storage), tell, and the rest of the
worker's time (each trial's heartbeat thread, and the worker's start, loading the study and the store, spread over
its trials). Each storage is searched `--rounds` times in alternating order. Prints the medians per trial and their
ratio to the training time, measured in this one run, and the CPU. PostgreSQL: --postgresql URL, else a throwaway
server started from Debian's package as the tests start theirs (tests/postgres_server.py), else left out, saying why.
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cse_kit import tune
from cse_kit.environment import BF16_UNITS, cpu_flags, cpu_model
from cse_kit.tune import trials as worker_trials

TESTS = Path(__file__).resolve().parents[1] / "tests"
SPACE = "lr=log(1e-5,1e-3); temp=(0.03,0.1)"
#: the parts of a trial's cost that are the search's own (worker_trials.work's loop), timed where they are called
PARTS = ("next_trial", "run lookup", "tell", "heartbeat, setup")


class Timed:
    """Seconds per trial in next_trial, run_trial (cse_kit.tune.trials) and Study.tell while installed (one list
    each)."""

    def __init__(self):
        self.seconds = {"next_trial": [], "run_trial": [], "tell": []}

    def __enter__(self):
        import optuna

        self.saved = [(worker_trials, "next_trial"), (worker_trials, "run_trial"), (optuna.Study, "tell")]
        self.originals = [getattr(owner, name) for owner, name in self.saved]
        for (owner, name), original in zip(self.saved, self.originals):
            setattr(owner, name, self._timed(name, original))
        return self

    def _timed(self, name: str, original):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name].append(time.perf_counter() - start)
        return timed

    def __exit__(self, *exc):
        for (owner, name), original in zip(self.saved, self.originals):
            setattr(owner, name, original)


def timed_work(study: tune.Study) -> dict:
    """The worker over the study, each trial's parts in seconds (the last next_trial, which finds the total held,
    is left out: a worker asks it once, not per trial; the rest of the worker's time is shared out over its trials)."""
    with Timed() as timed:
        start = time.perf_counter()
        ran = tune.work(study)
        wall = time.perf_counter() - start
    asked = timed.seconds["next_trial"][:ran]
    per_trial = [a + r + t for a, r, t in zip(asked, timed.seconds["run_trial"], timed.seconds["tell"])]
    rest = max(wall - sum(timed.seconds["next_trial"]) - sum(per_trial) + sum(asked), 0.0) / max(ran, 1)
    return {"trials": ran, "next_trial": asked, "run lookup": timed.seconds["run_trial"],
            "tell": timed.seconds["tell"], "heartbeat, setup": [rest] * ran}


def study_of(profile: str, trials: int, results: Path, data_dir, storage=None, name=None) -> tune.Study:
    study = tune.Study("simcse-bert", profile, tune.parse_space(SPACE), trials, [], 1, str(results), data_dir,
                         storage, name)
    tune.check(study)
    return study


def records(results: Path) -> int:
    return len(list((results / "records").glob("*.json")))


def measure(profile: str, trials: int, storages: dict, rounds: int, data_dir, folder: Path) -> dict:
    """Train the profile's trials once, then time the search over the stored runs on each storage, `rounds` times in
    alternating order (so that a warm cache or machine noise favours neither)."""
    results = folder / f"results-{profile}"
    trained = timed_work(study_of(profile, trials, results, data_dir))
    train_s = statistics.median(trained["run lookup"])  # a trial's run trained and its dev score read
    print(f"{profile}: {trained['trials']} trials trained, median {train_s:.2f} s a trial", flush=True)
    seconds = {label: {part: [] for part in PARTS} for label in storages}
    for r in range(rounds):
        for label in list(storages)[::1 if r % 2 == 0 else -1]:
            study = study_of(profile, trials, results, data_dir, storages[label], f"overhead-{profile}-{label}-{r}")
            before = records(results)
            parts = timed_work(study)
            if records(results) != before:
                raise SystemExit(f"{label}: a trial trained (its parameters were not a stored run's); rerun the bench")
            for part in PARTS:
                seconds[label][part] += parts[part]
    return {"train_s": train_s, "storages": {label: {part: statistics.median(values) for part, values in parts.items()}
                                             for label, parts in seconds.items()}}


def cpu_line() -> str:
    flags = cpu_flags(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").is_file() else set()
    units = [name for flag, name in BF16_UNITS if flag in flags]
    return f"CPU: {cpu_model() or 'unknown'}, {os.cpu_count()} cores, bf16 units: {', '.join(units) or 'none'}"


@contextlib.contextmanager
def postgresql(url: str | None):
    """A PostgreSQL URL: the given one, else a throwaway server's (tests/postgres_server.py), else None and why."""
    if url:
        yield url, None
        return
    sys.path.insert(0, str(TESTS))
    import postgres_server

    why = postgres_server.missing()
    if why:
        yield None, why
        return
    server = postgres_server.Server()
    try:
        server.start()
        yield server.database("tune_overhead", "bench", "bench"), None
    finally:
        server.stop()


def report(results: dict) -> None:
    print(f"\nthe search's own cost per trial (medians, ms), beside a trial's training; {cpu_line()}")
    print(f"{'profile':<8} {'storage':<11} " + " ".join(f"{p:>18}" for p in PARTS) + f" {'search':>9} "
          f"{'training':>10} {'search/training':>16}")
    for profile, measured in results.items():
        for label, parts in measured["storages"].items():
            search = sum(parts.values())
            print(f"{profile:<8} {label:<11} " + " ".join(f"{1000 * parts[p]:18.1f}" for p in PARTS)
                  + f" {1000 * search:9.1f} {measured['train_s']:9.2f}s {100 * search / measured['train_s']:15.2f}%")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", default="smoke", help="comma-separated: smoke, cpu (a cpu trial trains minutes)")
    p.add_argument("--trials", type=int, default=8, help="trials per study (default 8)")
    p.add_argument("--rounds", type=int, default=2, help="searches per storage, in alternating order (default 2)")
    p.add_argument("--postgresql", metavar="URL", help="a PostgreSQL database to measure on (default: a throwaway "
                                                       "server from Debian's package)")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    print(cpu_line(), flush=True)
    with tempfile.TemporaryDirectory() as tmp, postgresql(args.postgresql) as (url, why):
        storages = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.sqlite3'}", **({"postgresql": url} if url else {})}
        if why:
            print(f"PostgreSQL left out: {why}")
        results = {profile: measure(profile, args.trials, storages, args.rounds, args.data_dir, Path(tmp))
                   for profile in args.profiles.split(",")}
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
