"""`cse-kit status`: the coverage matrix of the results store, its trained runs, its stale records and those set
aside."""

from __future__ import annotations

from ..experiments import resolve_profile
from ..papers import PAPERS
from ..report import coverage, coverage_text, saved_profiles, saved_tables, select
from ..results import ResultStore, default_results_dir
from ..results.records import is_trained
from ..results.set_aside import restore_lines, stale_lines
from .common import check_results_dir, command, results_dir_arg


#: how many of the store's trained runs, the latest, `cse-kit status` lists below the coverage
LATEST_RUNS = 5


def add_status(sub) -> None:
    p = command(sub, "status", cmd_status)
    p.add_argument("--profile", help="whose results to show (paper, mini, cpu, smoke, mini-rehearsal or auto); "
                                     "default: every profile with saved tables")
    results_dir_arg(p)
    p.add_argument("--paper", nargs="+", metavar="PAPER", help="these papers only: " + ", ".join(PAPERS))
    p.add_argument("--runs", action="store_true", help="list every trained run of the store, one line each (below "
                                                       f"the coverage: the latest {LATEST_RUNS})")
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
    elif args.runs:
        print("\n".join(trained_run_lines(ResultStore(args.results_dir))))
    else:
        show_coverage(args.results_dir, args.profile, args.paper)
        print("\n".join(trained_run_lines(ResultStore(args.results_dir), LATEST_RUNS)))
    return 0


def trained_run_lines(store: ResultStore, latest: int | None = None) -> list[str]:
    """One line per trained run of the store (`cse-kit train`'s, a notebook's, a study's trial), the latest last;
    only the `latest` ones where given."""
    runs = sorted((r for r in store.records() if is_trained(r)), key=lambda r: r.get("created", "")) \
        if store.exists() else []
    shown = runs[-latest:] if latest else runs
    more = f"; the latest {len(shown)} (--runs lists them all)" if len(shown) < len(runs) else ""
    return [f"{len(runs)} trained run{'' if len(runs) == 1 else 's'} in {store.root / 'runs'}{more}",
            *(f"  {r['key']}  {_run_words(r)}" for r in shown)]


def _run_words(record: dict) -> str:
    subject, trained = record["subject"], record["train"]
    best = "no dev score" if trained.get("best") is None else f"best {trained['metric']} {trained['best']:.2f}"
    evaluated = ", ".join(sorted(record["metrics"])) or "none yet"
    return (f"{subject.get('preset') or subject.get('method')} {record.get('profile')} seed {record.get('seed')}: "
            f"{trained['steps']} steps, {best}; evaluations: {evaluated}")


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
