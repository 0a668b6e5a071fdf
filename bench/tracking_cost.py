"""What logging the training curves costs a run (issue 47): smoke-profile runs trained with the trackers and without
(`log_with=none`), in alternating rounds so that machine noise hits both alike.

  python bench/tracking_cost.py [--preset diffcse-bert-sts] [--log-with tensorboard] [--rounds 3] [--steps 16]
                                [--data-dir DIR]

Prints, per round and as medians: the run's training-step seconds (summary seconds.train), the seconds spent inside
the trackers' log calls (every log.jsonl record, measured around RunTrackers.log), their start and close, and the
whole train() call with and without the trackers. The target: logging at most 2% of the training-step time.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cse_kit.train import build_config, train
from cse_kit.train.tracking import RunTrackers


class Timed:
    """Seconds spent in RunTrackers' log, and in its start and finish, while installed."""

    def __init__(self):
        self.log = self.start_finish = 0.0
        self.calls = 0

    def __enter__(self):
        self.saved = {name: getattr(RunTrackers, name) for name in ("log", "start", "finish")}

        def wrap(name):
            method = self.saved[name]

            def timed(tracker, *args, **kwargs):
                start = time.perf_counter()
                try:
                    return method(tracker, *args, **kwargs)
                finally:
                    spent = time.perf_counter() - start
                    if name == "log":
                        self.log += spent
                        self.calls += 1
                    else:
                        self.start_finish += spent
            return timed

        for name in self.saved:
            setattr(RunTrackers, name, wrap(name))
        return self

    def __exit__(self, *exc):
        for name, method in self.saved.items():
            setattr(RunTrackers, name, method)


def one_run(preset: str, log_with: str, steps: int, data_dir, folder: Path) -> dict:
    cfg = build_config(preset, "smoke", {"output_dir": str(folder), "max_examples": 16 * steps, "log_with": log_with,
                                         **({"data_dir": data_dir} if data_dir else {})})
    with Timed() as timed:
        start = time.perf_counter()
        summary = train(cfg, progress=False, announce=lambda line: None)
        wall = time.perf_counter() - start
    return {"train": summary["seconds"]["train"], "log": timed.log, "calls": timed.calls,
            "start_finish": timed.start_finish, "wall": wall}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="diffcse-bert-sts")
    p.add_argument("--log-with", default="tensorboard")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=16, help="training steps of each run: one epoch of 16 x steps "
                   "examples (the smoke profile's batch); it logs every 2 and evaluates every 8")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    rows = {"none": [], args.log_with: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for log_with in (args.log_with, "none") if r % 2 == 0 else ("none", args.log_with):
                run = one_run(args.preset, log_with, args.steps, args.data_dir, Path(tmp) / f"{log_with}-{r}")
                rows[log_with].append(run)
                print(f"round {r + 1} {log_with:>12}: train steps {run['train']:6.2f} s, in log calls "
                      f"{run['log'] * 1000:7.1f} ms ({run['calls']} calls), start+close "
                      f"{run['start_finish'] * 1000:7.1f} ms, train() {run['wall']:6.2f} s", flush=True)
    med = {k: {f: statistics.median(run[f] for run in v) for f in v[0]} for k, v in rows.items()}
    logged = med[args.log_with]
    share = logged["log"] / logged["train"]
    print(f"\n{args.preset}, smoke profile, {args.steps} steps, {args.rounds} rounds (medians):")
    print(f"  logging to {args.log_with}: {logged['log'] * 1000:.1f} ms in {int(logged['calls'])} log calls = "
          f"{100 * share:.2f}% of the {logged['train']:.2f} s of training steps (target: at most 2%)")
    print(f"  start and close: {logged['start_finish'] * 1000:.0f} ms once per run; train() "
          f"{logged['wall']:.2f} s with, {med['none']['wall']:.2f} s without "
          f"({100 * (logged['wall'] / med['none']['wall'] - 1):+.1f}%, machine noise included)")
    return 0 if share <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
