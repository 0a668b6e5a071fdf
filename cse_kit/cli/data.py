"""`cse-kit data`: download, import and check the datasets the kit evaluates and trains on."""

from __future__ import annotations

import json
import sys

from .. import data
from ..train.presets import PROFILES, PROFILE_DATA
from .common import command, data_dir_arg


def add_data(sub) -> None:
    p_data = command(sub, "data", cmd_data)
    data_sub = p_data.add_subparsers(dest="action", required=True)
    p = command(data_sub, "download", cmd_data, "Download, verify and lay out datasets in the data directory (all "
                                                "when none is named).")
    p.add_argument("names", nargs="*")
    data_dir_arg(p)
    p = command(data_sub, "import", cmd_data, "Lay out datasets from local archives or folders in the data directory.")
    p.add_argument("paths", nargs="+")
    data_dir_arg(p)
    p = command(data_sub, "status", cmd_data, "Say which datasets are present and verified: one row per dataset, "
                                              "with the profiles that need it and its counts.")
    p.add_argument("names", nargs="*")
    p.add_argument("--profile", choices=list(PROFILES),
                   help="exit 1 unless every dataset this profile needs is present and verified")
    p.add_argument("--json", action="store_true")
    data_dir_arg(p)


def _print_status(report: dict) -> None:
    rows = []
    for name, r in report["datasets"].items():
        state = "verified" if r["verified"] else ("PROBLEM" if r["present"] else "missing")
        counts = " ".join(f"{k}={v}" for k, v in r["counts"].items())
        needed = ",".join(p for p, names in PROFILE_DATA.items() if name in names) or "-"
        rows.append((name, state, needed, counts))
    width = max(len(r[0]) for r in rows)
    print(f"{'dataset':<{width}}  {'state':<8}  {'needed by':<16}  counts")
    for name, state, needed, counts in rows:
        print(f"{name:<{width}}  {state:<8}  {needed:<16}  {counts}")
    for name, r in report["datasets"].items():
        for problem in r["problems"]:
            print(f"  {name}: {problem}", file=sys.stderr)


def cmd_data(args) -> int:
    if args.action == "download":
        placed = data.download(args.names, args.data_dir)
        print(f"downloaded and verified: {', '.join(placed)}")
    elif args.action == "import":
        for path in args.paths:
            placed = data.import_path(path, args.data_dir)
            print(f"{path}: imported {', '.join(placed)}")
    root = data.resolve_data_dir(args.data_dir)
    fill = ("Fill it with `cse-kit data import ARCHIVE...` (the archives of ../shared/data, or your own copies) or "
            "`cse-kit data download` (needs internet)")
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        print(f"cse-kit: data directory {root} {what} (misspelt --data-dir or $CSE_KIT_DATA?). {fill}.",
              file=sys.stderr)
        return 1
    named = getattr(args, "names", None) or None
    report = data.status(args.data_dir, named)
    if not any(r["present"] for r in report["datasets"].values()):
        print(f"cse-kit: data directory {root} holds none of the {len(report['datasets'])} datasets asked for. "
              f"{fill}.", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(report, indent=1))
    else:
        print(f"data directory: {data.resolve_data_dir(args.data_dir)}")
        _print_status(report)
    # a named dataset, or one the --profile needs, must be there and verified; every dataset there must be verified
    needed = set(named or ()) | set(PROFILE_DATA.get(getattr(args, "profile", None), ()))
    bad = [n for n, r in report["datasets"].items() if not r["verified"] and (n in needed or r["present"])]
    if bad:
        why = f" (needed by the {args.profile} profile)" if getattr(args, "profile", None) else ""
        print(f"cse-kit: missing or not verified{why}: {', '.join(bad)}. Fix: `cse-kit data import PATH` with an "
              f"intact copy, or `cse-kit data download {' '.join(bad)}`", file=sys.stderr)
        return 1
    return 0
