"""`cse-kit status`: the coverage matrix of the results store, its stale records and those set aside."""

from __future__ import annotations

from ..experiments import resolve_profile
from ..papers import PAPERS
from ..report import coverage, coverage_text, saved_profiles, saved_tables, select
from ..results import ResultStore, default_results_dir
from ..results.set_aside import restore_lines, stale_lines
from .common import check_results_dir, command, results_dir_arg


def add_status(sub) -> None:
    p = command(sub, "status", cmd_status)
    p.add_argument("--profile", help="whose results to show (paper, mini, cpu, smoke, mini-rehearsal or auto); "
                                     "default: every profile with saved tables")
    results_dir_arg(p)
    p.add_argument("--paper", nargs="+", metavar="PAPER", help="these papers only: " + ", ".join(PAPERS))
    p.add_argument("--stale", action="store_true", help="list the records computed with other major.minor versions "
                                                        "of torch, transformers, ... than this environment's, and "
                                                        "those set aside while they are recomputed")
    p.add_argument("--restore", nargs="+", metavar="KEY",
                   help="put these set-aside records (or `all`) back in place of their unfinished replacements")


def cmd_status(args) -> int:
    check_results_dir(args.results_dir)
    if args.restore:
        print("\n".join(restore_lines(ResultStore(args.results_dir), args.restore)))
    elif args.stale:
        words = f" --results-dir {args.results_dir}" if args.results_dir else ""
        print("\n".join(stale_lines(ResultStore(args.results_dir), words)))
    else:
        return show_coverage(args.results_dir, args.profile, args.paper)
    return 0


def show_coverage(results_dir, profile: str | None, papers: list[str] | None,
                  notebooks: list[str] | None = None) -> int:
    """The coverage matrix from what the notebooks last saved in the results store; executes nothing. Without a
    profile, one matrix per profile that has saved tables (none: says so)."""
    check_results_dir(results_dir)
    names = select(papers, notebooks)
    where = results_dir or default_results_dir()
    profiles = [resolve_profile(profile)] if profile else saved_profiles(results_dir)
    if not profiles:
        print(f"no saved tables in {where}: run a notebook or `cse-kit report --profile smoke` first")
        profiles = [resolve_profile("auto")]
    for shown in profiles:
        tables = {name: table for name, table in saved_tables(results_dir, shown).items() if name in names}
        print(f"profile {shown}; results {where}")
        print(coverage_text(coverage(tables, papers=papers), shown) + "\n")
    return 0
