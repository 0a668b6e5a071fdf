"""`cse-kit report`: every paper table's notebook executed (or reused) into the HTML report; its bill (--plan), its
tables as LaTeX and Markdown."""

from __future__ import annotations

import json
import os
import sys
import time

from ..experiments import resolve_profile
from ..papers import PAPERS
from ..report import build, select
from ..report.checkout import check_notebooks
from ..report.paper_tables import profile_of_store, write_report_tables
from ..report.plan import bill, measure_for, plan, text
from ..report.step_times import figures_for
from ..report.stopping import stopping_together
from ..results import EVAL_AMP_ENV, ResultStore
from ..results.parallel import CLUSTER_ENV, WORKERS_ENV, executor_params, jobs_dir, uses_workers
from ..train.tracking import LOG_WITH_ENV, chosen_trackers
from .common import check_at_least_one, check_results_dir, command, log_with_arg, results_dir_arg
from .status import show_coverage


def add_report(sub) -> None:
    p = command(sub, "report", cmd_report)
    p.add_argument("--profile", default="auto", help="paper, mini, cpu, smoke or mini-rehearsal; auto: paper with a "
                   "CUDA GPU, else mini where its models are cached or the Hub answers, else cpu")
    results_dir_arg(p)
    p.add_argument("--data-dir", help="data directory (default: $CSE_KIT_DATA or data/)")
    p.add_argument("--out", help="report folder (default: reports/)")
    p.add_argument("--force", action="store_true", help="re-execute every notebook (finished runs are still reused)")
    p.add_argument("--only", nargs="+", metavar="NOTEBOOK", help="these notebooks only, e.g. table8_lambda")
    p.add_argument("--paper", nargs="+", metavar="PAPER", help="these papers only: " + ", ".join(PAPERS))
    p.add_argument("--list", action="store_true",
                   help="print the coverage matrix and execute nothing (= cse-kit status)")
    p.add_argument("--latex", metavar="DIR",
                   help="write every table the report shows as LaTeX into DIR (booktabs, one .tex a table: mean ± "
                        "std, the paper's value, Δ and the page's marks), from the tables the notebooks saved in the "
                        "results store; executes nothing (run the report first). --profile auto: the store's profile")
    p.add_argument("--markdown", metavar="DIR",
                   help="the same tables as Markdown pipe tables into DIR (one .md a table); with --latex, both")
    p.add_argument("--recompute-stale", nargs="?", const="all", choices=["all", "evaluations"],
                   help="recompute the records computed with other library versions (cse-kit status --stale), "
                        "re-executing the notebooks; every other record is reused. Each is set aside with its model "
                        "until its replacement holds numbers (cse-kit status --restore puts it back). `evaluations`: "
                        "keep each stale run's model and evaluate it again, without training")
    p.add_argument("--jobs", type=int,
                   help="notebooks executed at once, each in its own kernel (default: smoke, one per CPU core up to "
                        "4, as its tiny runs keep one core busy at most; cpu and paper, 1: their training uses every "
                        "core or the GPU)")
    p.add_argument("--workers", type=int, default=1,
                   help="train a table's pending runs in this many worker processes (one per GPU, round robin), or "
                        "jobs with --cluster slurm (default 1: there every run is a job's); the results store's locks "
                        "keep any run from being trained twice")
    log_with_arg(p)
    p.add_argument("--amp", action="store_true",
                   help="evaluate under AMP (bf16 on a CPU with AMX or AVX512-BF16, as `eval --amp`) into records of "
                        "their own: faster, not the papers' fp32 protocol; the tables say so (= $CSE_KIT_EVAL_AMP=1)")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"],
                   help="where the workers run (submitit); SLURM parameters as JSON in $CSE_KIT_EXECUTOR_PARAMS, "
                        "e.g. '{\"slurm_partition\": \"gpu\"}'")
    p.add_argument("--plan", action="store_true",
                   help="print the report's bill and execute nothing: every training run its notebooks need on the "
                        "profile (seeds and grids included), its steps and hours from measured step times, per "
                        "notebook and in all, less the runs the results store holds, and the wall time on --workers "
                        "GPUs or jobs (docs/notebooks.md, \"The report's bill\")")
    p.add_argument("--measure", action="store_true",
                   help="with --plan: first time a few steps of each method the plan trains, and each final "
                        "evaluation it asks for, on this machine (minutes), into <results store>/step_times.json, "
                        "which later plans read before the shipped figures")
    p.add_argument("--device", metavar="NAME",
                   help="with --plan: price with the step times recorded for this device (e.g. 'NVIDIA H200'); "
                        "default: this machine's measured ones, else the shipped ones for the profile")
    p.add_argument("--json", action="store_true", help="with --plan: the bill as JSON")


def cmd_report(args) -> int:
    if args.list:
        return show_coverage(args.results_dir, args.profile, args.paper, args.only)
    if args.latex or args.markdown:
        return _write_paper_tables(args)
    if args.plan or args.measure:
        return _report_plan(args)
    if args.json or args.device:
        raise ValueError("--json and --device go with --plan (the report's bill); the report itself writes "
                         "reports/report.json")
    check_notebooks()  # a plain `pip install .` is refused before anything runs

    check_at_least_one(workers=args.workers, jobs=args.jobs)
    if args.log_with is not None:  # the notebooks' kernels and the workers inherit it, as the results folder

        chosen_trackers(args.log_with)  # an unknown name is refused here, not in every notebook
        os.environ[LOG_WITH_ENV] = args.log_with
    if args.amp:  # the notebooks' kernels inherit it, as the trackers

        os.environ[EVAL_AMP_ENV] = "1"

    store = ResultStore(args.results_dir, args.data_dir)
    store.check_readable()  # a record replaced by something else stops the report here, not in a notebook
    force = args.force
    if args.recompute_stale:
        stale = store.set_aside_stale(reevaluate_only=args.recompute_stale == "evaluations")
        print(f"recomputing {len(stale)} stale record(s) (other library versions): "
              f"{', '.join(stale) if stale else 'none'}; every other record is reused"
              + (f"; until each has its new numbers, the old one is kept in {store.root / 'set-aside'}" if stale
                 else ""))
        force = force or bool(stale)  # their notebooks execute again, finished runs reused
    if uses_workers(args.workers, args.cluster):  # the notebooks' kernels inherit these (cse_kit.results.parallel)
        executor_params()  # a malformed $CSE_KIT_EXECUTOR_PARAMS is said here, not in every notebook
        jobs_dir(store.root)  # as is a jobs folder others could write into
        os.environ[WORKERS_ENV], os.environ[CLUSTER_ENV] = str(args.workers), args.cluster
    start = time.perf_counter()
    with stopping_together():  # Ctrl-C or SIGTERM stops the notebooks' kernels and the workers too
        index = build(args.profile, args.results_dir, args.data_dir, args.out, force, args.only,
                      papers=args.paper, jobs=args.jobs)
    print(f"wrote {index} in {time.perf_counter() - start:.0f} s")
    failed = [run["name"] for run in json.loads((index.parent / "report.json").read_text())["runs"]
              if run["status"] == "failed"]
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)} (their errors are in the page and under "
              f"{index.parent / 'executed'})", file=sys.stderr)
        return 1
    return 0


def _report_plan(args) -> int:
    """`cse-kit report --plan [--measure]`: the report's bill; trains, evaluates and executes nothing (--measure times a
    few steps of each method first, in a temporary folder)."""
    check_at_least_one(workers=args.workers)
    if args.measure and args.device:
        raise ValueError("--measure times this machine; --device prices with another device's recorded times: "
                         "give one of them")
    profile = resolve_profile(args.profile)
    planned = plan(profile, select(args.paper, args.only), args.results_dir, args.data_dir, args.workers,
                   args.cluster)
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    figures = (measure_for(planned, args.data_dir, args.results_dir, log) if args.measure
               else figures_for(profile, args.results_dir, args.device))
    priced = bill(planned, figures)
    if args.json:
        print(json.dumps(priced, indent=1, default=str))
    else:
        command = " ".join(["cse-kit report", f"--profile {profile}", "--plan",
                            *([f"--workers {args.workers}"] if args.workers > 1 else []),
                            *([f"--cluster {args.cluster}"] if args.cluster != "local" else [])])
        print(text(priced, command))
    return 0


def _write_paper_tables(args) -> int:
    """`cse-kit report --latex DIR` / `--markdown DIR`: the saved tables as files; executes nothing."""
    check_results_dir(args.results_dir)
    profile = profile_of_store(args.results_dir, args.profile)
    paths = write_report_tables(args.results_dir, profile, select(args.paper, args.only), args.latex, args.markdown)
    counts = {suffix: sum(path.suffix == suffix for path in paths) for suffix in (".tex", ".md")}
    print(f"wrote {counts['.tex']} LaTeX and {counts['.md']} Markdown tables of the {profile} profile"
          + "".join(f"; {what} into {folder}" for what, folder in (("LaTeX", args.latex), ("Markdown", args.markdown))
                    if folder) + " (from the saved tables: nothing executed)")
    return 0
