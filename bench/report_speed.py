"""The report's wall time and CPU-seconds (issue 23: the smoke report of all four papers within 10 minutes; the cpu
report measured end to end).

  python bench/report_speed.py [--profile smoke] [--paper P ...] [--only NOTEBOOK ...] [--jobs N] [--amp]
                               [--data-dir data] [--keep DIR]
      # `cse-kit report` into an empty results store and report folder (temporary, or DIR, where a second call
      # resumes), its console streamed; then the wall time, the CPU-seconds of the report and everything it started
      # (kernels, workers), and each notebook's seconds, slowest first
  python bench/report_speed.py --logs LOG [LOG ...]
      # the same table from saved consoles of `cse-kit report` (a report run in parts, one log a part): each
      # notebook's last outcome, and their sum
  python bench/report_speed.py --records RESULTS_DIR
      # where a report's time went, from its results store's records (also printed after a run): training steps,
      # the dev evaluations inside training, and each evaluation the store ran, summed over the runs
  ... --record
      # also write each notebook's seconds (those it ran, not reused) into notebooks/seconds.json under the profile:
      # the report starts the longest notebooks first (cse_kit.report.longest_first)

Wall times depend on the machine's load: run it on an idle machine, and say so beside the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: `cse-kit report`'s line that ends a notebook: "[3 of 10 finished] table1_sts: ok (623 s)" ("[3/10] ..." in
#: consoles saved before issue 39)
OUTCOME = re.compile(r"^\[(?:\d+/\d+|\d+ of \d+ finished)\] (?P<name>\S+): (?P<status>ok|failed|reused) "
                     r"\((?P<seconds>\d+) s\)")
SMOKE_TARGET_S = 600


def outcomes(lines) -> dict[str, tuple[str, int]]:
    """notebook -> (status, seconds) of its last outcome line."""
    found = {}
    for line in lines:
        match = OUTCOME.match(line)
        if match:
            found[match["name"]] = (match["status"], int(match["seconds"]))
    return found


def minutes(seconds: float) -> str:
    hours, rest = divmod(round(seconds), 3600)
    return (f"{hours} h " if hours else "") + f"{rest // 60} min {rest % 60} s"


def print_table(found: dict[str, tuple[str, int]]) -> None:
    width = max((len(n) for n in found), default=8)
    for name, (status, seconds) in sorted(found.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:<{width}}  {status:<6}  {seconds:>6} s")
    failed = [n for n, (status, _) in found.items() if status == "failed"]
    print(f"{len(found)} notebooks, sum of their times {minutes(sum(s for _, s in found.values()))}"
          + (f"; FAILED: {', '.join(failed)}" if failed else "; none failed"))


def time_by_part(results_dir: Path) -> None:
    """The seconds every record of a results store spent in each part (its `timings`), summed, largest first."""
    from cse_kit.results import read_record

    if not (results_dir / "records").is_dir():
        raise SystemExit(f"{results_dir} holds no records/ folder: pass a results store (for a `--keep DIR` run, "
                         f"DIR/results)")
    parts, counts = {}, {}
    for path in sorted((results_dir / "records").glob("*.json")):
        for part, seconds in read_record(path)["timings"].items():
            parts[part] = parts.get(part, 0.0) + seconds
            counts[part] = counts.get(part, 0) + 1
    print(f"where the time went, from the records in {results_dir}:")
    for part, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {part:<28}  {seconds:>8,.0f} s  in {counts[part]} records")
    print(f"  {'sum':<28}  {sum(parts.values()):>8,.0f} s")


def record(found: dict[str, tuple[str, int]], profile: str) -> None:
    """found's measured seconds into NOTEBOOK_SECONDS under profile (the others kept)."""
    from cse_kit.io import write_json_atomic
    from cse_kit.report.scheduling import NOTEBOOK_SECONDS  # where the report reads it (tests replace it there)

    measured = {name: seconds for name, (status, seconds) in found.items() if status != "reused"}
    table = json.loads(NOTEBOOK_SECONDS.read_text()) if NOTEBOOK_SECONDS.is_file() else {}
    table[profile] = dict(sorted({**table.get(profile, {}), **measured}.items()))
    write_json_atomic(NOTEBOOK_SECONDS, table)
    print(f"recorded {len(measured)} notebooks' seconds in {NOTEBOOK_SECONDS} ({profile})")


def run_report(args) -> None:
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="report-speed-"))
    command = [sys.executable, "-m", "cse_kit.cli", "report", "--profile", args.profile, "--data-dir",
               str(Path(args.data_dir).resolve()), "--results-dir", str(folder / "results"), "--out",
               str(folder / "report")]
    for flag, values in (("--paper", args.paper), ("--only", args.only)):
        if values:
            command += [flag, *values]
    if args.jobs:
        command += ["--jobs", str(args.jobs)]
    if args.amp:
        command.append("--amp")
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as report:
        for line in report.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    wall = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\nexit status {report.returncode}; folder {folder}")
    found = outcomes(lines)
    print_table(found)
    if args.record:
        record(found, args.profile)
    if (folder / "results" / "records").is_dir():  # not where the report stopped before its first run
        time_by_part(folder / "results")
    print(f"wall {minutes(wall)} ({wall:.0f} s), CPU {children.ru_utime + children.ru_stime:,.0f} s "
          f"(user {children.ru_utime:,.0f} s, system {children.ru_stime:,.0f} s)")
    if args.profile == "smoke" and not (args.paper or args.only):
        print(f"target: the whole smoke report within {SMOKE_TARGET_S // 60} min: "
              f"{'met' if wall <= SMOKE_TARGET_S else 'NOT met'}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="smoke", help="smoke, cpu or paper (default smoke)")
    p.add_argument("--paper", nargs="+", help="these papers only (cse-kit report --paper)")
    p.add_argument("--only", nargs="+", help="these notebooks only (cse-kit report --only)")
    p.add_argument("--jobs", type=int, help="notebooks at once (default: the report's)")
    p.add_argument("--amp", action="store_true", help="evaluate under AMP (cse-kit report --amp)")
    p.add_argument("--data-dir", default="data", help="the data directory (default data/)")
    p.add_argument("--keep", help="results store and report under this folder, kept (a second call resumes)")
    p.add_argument("--record", action="store_true",
                   help="write the notebooks' seconds into notebooks/seconds.json (the report's start order)")
    p.add_argument("--logs", nargs="+", help="print the table of these saved report consoles; run nothing")
    p.add_argument("--records", type=Path, help="print where this results store's time went; run nothing")
    args = p.parse_args(argv)
    if args.records:
        time_by_part(args.records)
    elif args.logs:
        found = {}
        for log in args.logs:
            found.update(outcomes(Path(log).read_text().splitlines()))
        print_table(found)
        if args.record:
            record(found, args.profile)
    else:
        run_report(args)


if __name__ == "__main__":
    main()
