"""The `cse-kit` command: one subcommand a task, each one's arguments (`add_<command>`) beside its handler
(`cmd_<command>`), which asks the layers below; `main` turns an expected failure into one line."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import signal
import sys
import textwrap
import traceback
from pathlib import Path

PURPOSE = ("Reproduce contrastive sentence-embedding papers (DiffCSE, SCD, ESimCSE, DiffAug; SimCSE the baseline): "
           "get the data, evaluate and train models, build the report of every paper table.")
DEBUG_ENV = "CSE_KIT_DEBUG"


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a scheduler's stop), raised where the process is, so that what it was writing is removed as
    on Ctrl-C and the command says that it stopped."""


def _raise_terminated(signum, frame):
    raise Terminated


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose --help opens with what the command is for (`purpose`, one sentence) above its usage,
    and which takes --debug wherever it stands (`cse-kit --debug train ...` or `cse-kit train ... --debug`)."""

    def __init__(self, *args, purpose: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.purpose = purpose
        # SUPPRESS: a subcommand's parser leaves the top parser's --debug as given
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                          help=f"on an error, show its traceback above its one line (= ${DEBUG_ENV}=1)")

    def format_help(self) -> str:
        width = max(shutil.get_terminal_size().columns - 2, 40)  # argparse's own width
        return textwrap.fill(self.purpose, width) + "\n\n" + super().format_help()


def _command(sub, name: str, purpose: str, handler, **kwargs) -> _Parser:
    """A subcommand: its --help and the list in `cse-kit --help` say purpose; handler(args) runs it."""
    p = sub.add_parser(name, help=purpose, purpose=purpose, **kwargs)
    p.set_defaults(func=handler)
    return p


def _log_with_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-with", metavar="NAME[,NAME]",
                   help="trackers of the training curves: none, or Accelerate's (tensorboard, wandb, mlflow, trackio, "
                        "aim, comet_ml, clearml, dvclive, swanlab); default: $CSE_KIT_LOG_WITH, else tensorboard where "
                        "it is installed (event files beside each run's log.jsonl)")


def _data_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=None,
                   help="data directory (default: $CSE_KIT_DATA, else data/ in the repository)")


def _results_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results-dir", help="results store (default: $CSE_KIT_RESULTS or reports/results)")


def _check_results_dir(results_dir) -> None:
    """Refuse a --results-dir that is not a folder before reading it: a misspelt path would read as a store with
    nothing in it (no saved table, no stale record)."""
    if results_dir and not Path(results_dir).is_dir():
        what = "is a file" if Path(results_dir).exists() else "does not exist"
        raise ValueError(f"--results-dir {results_dir} is not a results store: it {what}. Check the path (a store is "
                         "the folder `cse-kit report` and the notebooks write into, by default reports/results)")


def add_data(sub) -> None:
    from .train.presets import PROFILES

    p_data = _command(sub, "data", "Download, import and check the datasets the kit evaluates and trains on.", cmd_data)
    data_sub = p_data.add_subparsers(dest="action", required=True)
    p = _command(data_sub, "download", "Download, verify and lay out datasets in the data directory (all when none is "
                                       "named).", cmd_data)
    p.add_argument("names", nargs="*")
    _data_dir_arg(p)
    p = _command(data_sub, "import", "Lay out datasets from local archives or folders in the data directory.", cmd_data)
    p.add_argument("paths", nargs="+")
    _data_dir_arg(p)
    p = _command(data_sub, "status", "Say which datasets are present and verified: one row per dataset, with the "
                                     "profiles that need it and its counts.", cmd_data)
    p.add_argument("names", nargs="*")
    p.add_argument("--profile", choices=list(PROFILES),
                   help="exit 1 unless every dataset this profile needs is present and verified")
    p.add_argument("--json", action="store_true")
    _data_dir_arg(p)


def _print_status(report: dict) -> None:
    from .train.presets import PROFILE_DATA

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
    from . import data
    from .train.presets import PROFILE_DATA

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


def add_eval(sub) -> None:
    from .eval.encode import POOLERS

    p = _command(sub, "eval", "Evaluate a model with the papers' SentEval protocol (STS and transfer tasks), or with "
                              "MTEB (--benchmark mteb).", cmd_eval,
                 formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="poolers:\n" + "\n".join(f"  {k}: {v}" for k, v in POOLERS.items()))
    p.add_argument("--model", required=True, help="short name, Hub id or local directory")
    p.add_argument("--pooler", choices=list(POOLERS),
                   help="how a sentence vector is read off the model (recorded with every result); default: the "
                        "pooler in a kit-trained model's cse_kit.json")
    p.add_argument("--template", help="the prompt poolers' template, *sent0* for the sentence and *mask* for the mask "
                                      "token; default: the model's cse_kit.json, else PromptBERT's "
                                      "'This sentence of \"*sent0*\" means*mask*.'")
    p.add_argument("--benchmark", default="senteval", choices=["senteval", "mteb"],
                   help="senteval (default): the papers' protocol, the kit's own implementation; mteb: MTEB tasks "
                        "through the mteb package (pip install -e '.[mteb]'), results into the results store")
    p.add_argument("--tasks", help="SentEval: sts, transfer, all, or comma-separated names (default sts). MTEB: "
                                   "comma-separated task or benchmark names; default: a CPU selection of 12 English "
                                   "tasks (cse_kit.eval.mteb_eval.CPU_TASKS); 'MTEB(eng, v2)': the full English "
                                   "benchmark")
    p.add_argument("--mode", default="test", choices=["dev", "test", "fasttest"],
                   help="test: paper numbers (transfer kfold 10, adam); fasttest: test numbers with the fast "
                        "transfer config (kfold 5, rmsprop); dev: dev numbers, fast config")
    p.add_argument("--output", help="write the result JSON here (MTEB: mteb's full result of every task)")
    p.add_argument("--results-dir", help="MTEB: the results store (default: $CSE_KIT_RESULTS or reports/results)")
    p.add_argument("--force", action="store_true", help="MTEB: evaluate again the tasks the results store has")
    p.add_argument("--seed", type=int, default=1111, help="transfer classifier seed (SentEval's default 1111)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="batches of this many (padded) tokens instead of --batch-size sentences (default: 16384 on "
                        "CUDA, none on CPU)")
    p.add_argument("--max-length", type=int, default=None,
                   help="truncate to this many tokens (default: the model's cse_kit.json, else none)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--amp", action="store_true", help="encode under bf16/fp16 autocast on a GPU, or bf16 on a CPU "
                   "with a bf16 unit (AMX, AVX512-BF16; elsewhere fp32): faster, not the papers' fp32 protocol; "
                   "recorded in the result")
    _data_dir_arg(p)


def cmd_eval(args) -> int:
    from .eval import Encoder, evaluate, format_tables, parse_tasks
    from .eval.encode import PROMPT_POOLERS
    from .io import write_json_atomic
    from .models import load_model, resolve_reference
    from .train.export import ExportSettings

    if args.benchmark == "mteb":
        from .eval.mteb_eval import resolve_tasks

        tasks = resolve_tasks(args.tasks)
    else:
        tasks = parse_tasks(args.tasks or "sts")  # fail on a typo before loading anything
    resolve_reference(args.model, args.data_dir)  # a path that does not exist is said to be one
    stated = ExportSettings(args.model)
    pooler = args.pooler or _pooler_of(args.model, stated)
    tokenizer, model = load_model(args.model, data_dir=args.data_dir)
    reading = args.template or stated.prompt
    if reading and not args.template and pooler in PROMPT_POOLERS:
        print(f"prompt reading {reading.describe()} (from {args.model}/cse_kit.json)")
    max_length = args.max_length or stated.max_length
    if max_length and not args.max_length:
        print(f"sentences cut at {max_length} tokens (from {args.model}/cse_kit.json; --max-length to change)")
    encoder = Encoder(model, tokenizer, pooler, batch_size=args.batch_size, max_tokens=args.max_tokens,
                      max_length=max_length, device=args.device, amp=args.amp, template=reading)
    if args.amp:
        print(encoder.amp_line())
    if args.benchmark == "mteb":
        return _eval_mteb(args, encoder, tasks)
    result = evaluate(encoder, tasks, args.mode, args.data_dir, args.seed, model_name=args.model)
    print(format_tables(result))
    if args.output:
        from .data import unverified_reads

        unverified = unverified_reads()  # read under CSE_KIT_ALLOW_UNVERIFIED_DATA: said with the result
        said = {**result, **({"unverified_data": unverified} if unverified else {})}
        print(f"wrote {write_json_atomic(args.output, said)}")
    return 0


def _eval_mteb(args, encoder, tasks) -> int:
    """MTEB through the mteb package, into the results store: a model this store trained adds to its run's record,
    any other to the record of (model, pooler)."""
    from .io import write_json_atomic
    from .eval.mteb_eval import format_table, version
    from .results import Pretrained, ResultStore

    store = ResultStore(args.results_dir, args.data_dir)
    target = store.run_of_model(args.model) or Pretrained(args.model, encoder.pooler)
    record, reused = store.get_mteb(target, tasks, encoder=encoder, force=args.force)
    results = {task.metadata.name: record["metrics"]["mteb"][task.metadata.name] for task in tasks}
    print(f"model {args.model}  pooler {encoder.pooler}  MTEB {version()} (main scores x100; mteb's own evaluation)")
    print(format_table(results))
    if reused:
        print(f"reused from the results store: {', '.join(reused)} (--force evaluates them again)")
    print(f"results store: record {record['key']} in {store.root}")
    if args.output:
        full = {"benchmark": "mteb", "mteb_version": version(), "model": args.model, "pooler": encoder.pooler,
                "record": record["key"], "tasks": results}
        print(f"wrote {write_json_atomic(args.output, full)}")
    return 0


def _pooler_of(model: str, stated=None) -> str:
    """The pooler a kit-trained model was exported with (stated: its ExportSettings), or the one a released
    checkpoint of the papers must be evaluated with (cse_kit/papers/released.json); other models must say it."""
    from .papers.released import lookup
    from .train.export import ExportSettings

    stated = stated or ExportSettings(model)
    if stated.pooler:
        print(f"pooler {stated.pooler} (from {model}/cse_kit.json)")
        return stated.pooler
    entry = lookup(model)
    if entry:
        print(f"pooler {entry['pooler']} (released checkpoint of {entry['paper']}; source: {entry['source']})")
        return entry["pooler"]
    raise ValueError(f"--pooler is required for {model} (it has no cse_kit.json saying how it was trained and is not "
                     "a released checkpoint of the papers)")


def add_train(sub) -> None:
    from .train import PRESETS
    from .train.presets import PROFILES

    p = _command(sub, "train", "Train a preset (SimCSE, DiffCSE, SCD, ESimCSE, DiffAug, ...) on a profile; an "
                               "interrupted run resumes.", cmd_train,
                 epilog="settings for --set: the fields of cse_kit.train.TrainConfig, e.g. --set lam=0.01 "
                        "--set mask_ratio=0.15 --set generator_output=sample --set batch_size=128")
    p.add_argument("--preset", required=True, choices=list(PRESETS))
    p.add_argument("--profile", default="auto", choices=["auto", *PROFILES],
                   help="paper: the papers' models and Wiki1M (GPU, Hub); mini: Google's masked-LM BERT miniatures "
                        "with the papers' recipes (Hub once); cpu: all-MiniLM-L6-v2 on the local Wiki1M sample; "
                        "smoke: tiny random models, seconds; mini-rehearsal: mini's models at smoke's sizes; auto "
                        "(default, as the notebooks): paper with a CUDA GPU, else mini where its models are cached or "
                        "the Hub answers, else cpu")
    p.add_argument("--output-dir", help="run directory (default runs/<preset>-<profile>)")
    p.add_argument("--seed", type=int)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="any other setting (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    _log_with_arg(p)
    p.add_argument("--resume-with-changes", action="store_true",
                   help="resume a checkpoint although settings that change training differ (lr, schedule length, ...): "
                        "they apply from the checkpoint's step on, and are recorded in summary.json")
    _data_dir_arg(p)


def cmd_train(args) -> int:
    from .experiments import chosen_profile
    from .train import build_config, train
    from .train.launch import join_srun_step
    from .train.loop import TrainingStopped
    from .train.preemption import slurm_training

    join_srun_step()  # under `srun --ntasks N`, the N tasks train one run together
    profile = chosen_profile(args.profile)
    cfg = build_config(args.preset, profile, _train_overrides(args))
    args.run_dir = cfg.output_dir  # named when the run is stopped (main)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    # in a SLURM job SIGTERM and SIGUSR2 stop the run after its current step, at a checkpoint, and it is requeued
    preemption = slurm_training()
    if preemption is None:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        summary = train(cfg, progress=not args.no_progress, resume_with_changes=args.resume_with_changes)
    except TrainingStopped as stopped:
        preemption.leave(f"{stopped}")
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    print(f"best {cfg.metric} {summary['best']:.2f} at step {summary['best_step']} of {summary['steps']}; "
          f"model: {summary['model']}")
    print(f"evaluate it: cse-kit eval --model {summary['model']} --tasks sts --mode test")
    from .train.tracking import watch_commands

    for command in watch_commands(Path(cfg.output_dir)):
        print(f"watch its curves: {command}")
    return 0


def _train_overrides(args) -> list[str]:
    out = list(args.set or [])
    for name in ("output_dir", "seed", "data_dir", "max_steps", "log_with"):
        if getattr(args, name) is not None:
            out.append(f"{name}={getattr(args, name)}")
    return out


def add_fit_mlm_head(sub) -> None:
    p = _command(sub, "fit-mlm-head", "Fit the masked-LM head of an encoder-only checkpoint: a DiffCSE generator where "
                                      "no masked-LM checkpoint is available.", cmd_fit_mlm_head)
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--output", help="where to save it (default for all-MiniLM-L6-v2: <data dir>/models/"
                                    "all-MiniLM-L6-v2-mlm, found by that name)")
    p.add_argument("--corpus", default="Wiki1M-sample")
    p.add_argument("--steps", type=int, default=300)
    _data_dir_arg(p)


def cmd_fit_mlm_head(args) -> int:
    from .methods.mlm_head import fit_mlm_head
    from .models import FITTED_MLM, fitted_mlm_dir

    names = {base: name for name, base in FITTED_MLM.items()}
    output = args.output or (fitted_mlm_dir(names[args.model], args.data_dir) if args.model in names else None)
    if output is None:
        raise ValueError(f"give --output for {args.model} (only {', '.join(names)} have a default place)")
    report = fit_mlm_head(args.model, output, corpus=args.corpus, data_dir=args.data_dir, steps=args.steps)
    print(f"masked-token accuracy on {report['heldout_sentences']} held-out sentences: "
          f"{report['masked_token_accuracy']:.1f}% (before fitting {report['accuracy_before_fitting']:.1f}%); "
          f"saved {output}")
    return 0


def add_export_st(sub) -> None:
    p = _command(sub, "export-st", "Save a kit-trained model as a sentence-transformers model.", cmd_export_st)
    p.add_argument("model_dir")
    p.add_argument("output")
    p.add_argument("--pooler", help="default: from the model's cse_kit.json")


def cmd_export_st(args) -> int:
    from .train import export_sentence_transformers

    print(f"wrote {export_sentence_transformers(args.model_dir, args.output, args.pooler)}")
    return 0


def add_publish(sub) -> None:
    p = _command(sub, "publish", "Make a trained run a folder to share: the model (sentence-transformers where it can "
                                 "be), its model card from the run's record, MTEB's results layout; --push uploads it "
                                 "to the Hugging Face Hub.", cmd_publish)
    p.add_argument("run", metavar="MODEL_OR_RUN",
                   help="a results store's record key (a notebook's table has one per run), its runs/<key> folder or "
                        "model, or a `cse-kit train` run folder")
    p.add_argument("--out", required=True, help="the folder to write (replaced whole)")
    _results_dir_arg(p)
    p.add_argument("--repo-id", metavar="ORG/NAME", help="the Hub repository it goes to (named in the card)")
    p.add_argument("--push", action="store_true", help="upload the folder to --repo-id (created if missing) in one "
                                                       "commit; needs a token (`hf auth login` or HF_TOKEN)")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--license", help="the model's licence (a Hub licence id); default: the base model's")
    p.add_argument("--no-st", action="store_true",
                   help="keep the kit's export (loaded with cse-kit) even where a sentence-transformers model is "
                        "possible")


def cmd_publish(args) -> int:
    """The published folder of a run (cse_kit.publish), and with --push its upload to the Hub."""
    from .publish import PublishError, publish, push, push_command

    _check_results_dir(args.results_dir)
    if args.push and not args.repo_id:
        raise PublishError("--push needs --repo-id ORG/NAME, the Hub repository to upload to")
    done = publish(args.run, args.out, results_dir=args.results_dir, repo_id=args.repo_id, license=args.license,
                   st=not args.no_st)
    print(f"wrote {done.folder}: a {done.kind} model, its card README.md"
          + (f", MTEB results in {done.mteb}" if done.mteb else ""))
    if args.push:
        try:
            url = push(done.folder, args.repo_id, private=args.private)
        except PublishError as err:
            print(f"cse-kit: not published: {err}", file=sys.stderr)
            return 2
        print(f"published {args.repo_id}{' (private)' if args.private else ''}: {url}")
    elif args.repo_id:
        print("push it: " + push_command(args.run, args.out, repo_id=args.repo_id, results_dir=args.results_dir,
                                         license=args.license, st=not args.no_st, private=args.private))
    return 0


def add_report(sub) -> None:
    from .papers import PAPERS

    p = _command(sub, "report", "Execute (or reuse) every paper table's notebook and build the HTML report, "
                                "reports/index.html.", cmd_report)
    p.add_argument("--profile", default="auto", help="paper, mini, cpu, smoke or mini-rehearsal; auto: paper with a "
                   "CUDA GPU, else mini where its models are cached or the Hub answers, else cpu")
    _results_dir_arg(p)
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
    _log_with_arg(p)
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
    import time

    from .report import build
    from .report.checkout import check_notebooks
    from .report.stopping import stopping_together

    if args.list:
        return cmd_status(args)
    if args.latex or args.markdown:
        return _write_paper_tables(args)
    if args.plan or args.measure:
        return _report_plan(args)
    if args.json or args.device:
        raise ValueError("--json and --device go with --plan (the report's bill); the report itself writes "
                         "reports/report.json")
    check_notebooks()  # a plain `pip install .` is refused before anything runs

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.log_with is not None:  # the notebooks' kernels and the workers inherit it, as the results folder
        from .train.tracking import LOG_WITH_ENV, chosen_trackers

        chosen_trackers(args.log_with)  # an unknown name is refused here, not in every notebook
        os.environ[LOG_WITH_ENV] = args.log_with
    if args.amp:  # the notebooks' kernels inherit it, as the trackers
        from .results import EVAL_AMP_ENV

        os.environ[EVAL_AMP_ENV] = "1"
    from .results import ResultStore
    from .results.parallel import CLUSTER_ENV, WORKERS_ENV, executor_params, jobs_dir, uses_workers

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
    from .experiments import resolve_profile
    from .report import select
    from .report.plan import bill, measure_for, plan, text
    from .report.step_times import figures_for

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
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
    from .report import select
    from .report.paper_tables import profile_of_store, write_report_tables

    _check_results_dir(args.results_dir)
    profile = profile_of_store(args.results_dir, args.profile)
    paths = write_report_tables(args.results_dir, profile, select(args.paper, args.only), args.latex, args.markdown)
    counts = {suffix: sum(path.suffix == suffix for path in paths) for suffix in (".tex", ".md")}
    print(f"wrote {counts['.tex']} LaTeX and {counts['.md']} Markdown tables of the {profile} profile"
          + "".join(f"; {what} into {folder}" for what, folder in (("LaTeX", args.latex), ("Markdown", args.markdown))
                    if folder) + " (from the saved tables: nothing executed)")
    return 0


def add_status(sub) -> None:
    from .papers import PAPERS

    p = _command(sub, "status", "Show which of the four papers' tables and figures the results store holds (the "
                                "coverage matrix); executes nothing.", cmd_status)
    p.add_argument("--profile", help="whose results to show (paper, mini, cpu, smoke, mini-rehearsal or auto); "
                                     "default: every profile with saved tables")
    _results_dir_arg(p)
    p.add_argument("--paper", nargs="+", metavar="PAPER", help="these papers only: " + ", ".join(PAPERS))
    p.add_argument("--stale", action="store_true", help="list the records computed with other major.minor versions "
                                                        "of torch, transformers, ... than this environment's, and "
                                                        "those set aside while they are recomputed")
    p.add_argument("--restore", nargs="+", metavar="KEY",
                   help="put these set-aside records (or `all`) back in place of their unfinished replacements")


def cmd_status(args) -> int:
    """The coverage matrix from what the notebooks last saved in the results store; executes nothing. Without
    --profile, one matrix per profile that has saved tables (none: says so)."""
    from .experiments import resolve_profile
    from .report import coverage, coverage_text, saved_profiles, saved_tables, select
    from .results import default_results_dir

    _check_results_dir(args.results_dir)
    names = select(args.paper, getattr(args, "only", None))
    where = args.results_dir or default_results_dir()
    if getattr(args, "restore", None):
        return _restore(args.results_dir, args.restore)
    if getattr(args, "stale", False):
        return _stale_status(args.results_dir)
    profiles = [resolve_profile(args.profile)] if args.profile else saved_profiles(args.results_dir)
    if not profiles:
        print(f"no saved tables in {where}: run a notebook or `cse-kit report --profile smoke` first")
        profiles = [resolve_profile("auto")]
    for profile in profiles:
        tables = {name: table for name, table in saved_tables(args.results_dir, profile).items() if name in names}
        print(f"profile {profile}; results {where}")
        print(coverage_text(coverage(tables, papers=args.paper), profile) + "\n")
    return 0


def _stale_status(results_dir) -> int:
    """`cse-kit status --stale`: one line per record that other library versions computed, with why, and one per
    record set aside while it is recomputed."""
    from .environment import describe_versions
    from .results import ResultStore

    store = ResultStore(results_dir)
    stale, aside = store.stale(), store.set_aside()
    here = ", ".join(f"{k} {v}" for k, v in describe_versions().items())
    if not stale and not aside:
        print(f"no stale record in {store.root}: every record was computed with this environment's library "
              f"versions (major.minor of {here})")
        return 0
    for key, why in stale.items():
        print(f"{key}  {_run_words(store.read(key))}: {'; '.join(why)}")
    if stale:
        print(f"{len(stale)} stale record(s) in {store.root}; `cse-kit report --recompute-stale` recomputes them")
    for key, note in aside.items():
        print(f"{key}  set aside {note.get('when', '')} ({'; '.join(note['why'])}), its replacement unfinished: "
              f"`cse-kit status --restore {key}{_results_dir_words(results_dir)}` puts it back")
    return 0


def _run_words(record: dict) -> str:
    subject = record["subject"]
    what = subject.get("preset") or subject.get("method") if subject["kind"] == "trained" else subject["model"]
    seed = f", seed {record['seed']}" if record.get("seed") is not None else ""
    return f"{what} ({record.get('profile') or 'no'} profile{seed})"


def _results_dir_words(results_dir) -> str:
    return f" --results-dir {results_dir}" if results_dir else ""


def _restore(results_dir, keys: list[str]) -> int:
    """`cse-kit status --restore KEY|all`: set-aside records back in place."""
    from .results import ResultStore

    store = ResultStore(results_dir)
    aside = store.set_aside()
    keys = list(aside) if keys == ["all"] else keys
    unknown = [key for key in keys if key not in aside]
    if unknown:
        raise ValueError(f"no record {unknown[0]} is set aside in {store.root} (set aside: "
                         f"{', '.join(aside) or 'none'}; `cse-kit status --stale` lists them)")
    for key in keys:
        store.restore(key)
        print(f"{key}  restored: {_run_words(store.read(key))}")
    return 0


def add_doctor(sub) -> None:
    from .doctor import QUICK_TRANSFER, REFERENCES, WRITE_COMMAND

    p = _command(sub, "doctor", "Check, before spending GPU-hours, that this machine and its library stack reproduce "
                                "the kit's reference numbers: one line per check; exit 1 when one differs beyond its "
                                "tolerance.", cmd_doctor)
    p.add_argument("--quick", action="store_true",
                   help="check the README's main command on its STS tasks and one transfer task, "
                        f"{QUICK_TRANSFER}, instead of all seven (the other six encode 100k sentences): under 3 "
                        "minutes on 2 cores")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"],
                   help="slurm: measure in a SLURM job, on the nodes that will train ($CSE_KIT_EXECUTOR_PARAMS, "
                        "e.g. '{\"slurm_partition\": \"gpu\"}')")
    p.add_argument("--write-references", action="store_true",
                   help="after an intended change: rewrite the numbers that moved or had no reference, keep those "
                        "still the same, and record the code's digest where every check was measured (without "
                        f"--quick: {WRITE_COMMAND})")
    p.add_argument("--references", default=REFERENCES, metavar="FILE",
                   help="compare with (or write) this file instead of the kit's (a lab's own references)")
    _data_dir_arg(p)


def cmd_doctor(args) -> int:
    from . import doctor

    try:
        return doctor.run(args.quick, args.data_dir, args.cluster, args.write_references, args.references)
    except doctor.JobFailed as error:
        print(f"cse-kit: error: {error}", file=sys.stderr)
        return 2


def add_tune(sub) -> None:
    from .experiments.tuning import SPACE_SYNTAX
    from .train import PRESETS
    from .train.presets import PROFILES

    p = _command(sub, "tune", "Search a preset's settings with Optuna (seeded TPE) at a budget of trials, each a run "
                              "of the results store selected on its dev score; then test the chosen configuration "
                              "over seeds.", cmd_tune,
                 epilog='e.g. cse-kit tune --preset diffcse-bert-sts --profile smoke --trials 8 --space '
                        '"lr=log(1e-5,1e-4); temp=(0.02,0.1); diffcse.lambda_weight=log(1e-3,1e-1)"')
    p.add_argument("--preset", required=True, choices=list(PRESETS))
    p.add_argument("--profile", default="auto", choices=["auto", *PROFILES])
    p.add_argument("--space", required=True, help=f"the settings searched: {SPACE_SYNTAX}")
    p.add_argument("--trials", type=int, required=True, help="the study's total number of trials (a rerun finishes "
                                                            "what is missing; one that finds them all trains nothing)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a setting every trial takes (repeatable)")
    p.add_argument("--seed", type=int, default=1, help="the trials' training seed and the sampler's (default 1)")
    p.add_argument("--workers", type=int, default=1, help="workers on the one study: local processes, or SLURM jobs "
                                                          "with --cluster slurm (default 1)")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"],
                   help="slurm: the workers are SLURM jobs ($CSE_KIT_EXECUTOR_PARAMS, e.g. '{\"slurm_partition\": "
                        "\"gpu\"}'); give a storage every node reaches (--storage postgresql://... or journal:PATH "
                        "on a shared file system)")
    p.add_argument("--storage", help="Optuna storage: a database URL (postgresql://user:pass@host/db), "
                                     "journal:PATH (a journal file on a shared file system); default: "
                                     "studies.sqlite3 beside the results store")
    p.add_argument("--study", help="the study's name (default: from what it searches)")
    p.add_argument("--fail-running", action="store_true",
                   help="first mark the study's running trials failed and run them again, but those a live worker "
                        "holds: a killed worker's trial that no trial lock judges where the storage has no heartbeat "
                        "(journal:PATH); only while none of its workers runs")
    p.add_argument("--dashboard", metavar="[HOST:]PORT",
                   help="serve optuna-dashboard on the study's storage at http://127.0.0.1:PORT while it runs, and "
                        "after, until Ctrl-C (a finished study: only the dashboard)")
    p.add_argument("--prune", nargs="?", const="median", metavar="PRUNER",
                   help="stop a trial's run at a dev evaluation where Optuna's pruner says it will not win (the "
                        "trial is recorded pruned, its run unfinished): median (the default), percentile, hyperband, "
                        "successive-halving or threshold, with its Optuna class's arguments if any: "
                        "'median(n_startup_trials=5, n_warmup_steps=100)'. Runs are evaluated every eval_steps")
    p.add_argument("--heartbeat", type=int, default=30, metavar="SECONDS",
                   help="how often a running trial says it is alive (default 30); one silent for 4 times as long is "
                        "taken for a killed worker's and run again. A worker sharing the results store is judged at "
                        "once by its trial lock (locks/trial-STUDY-N.lock), whatever the heartbeat")
    p.add_argument("--storage-patience", type=float, default=60, metavar="SECONDS",
                   help="how long a trial's bookkeeping waits for a storage that stopped answering (a dropped "
                        "connection, a restarting server), trying again, before the command stops in one line saying "
                        "what was kept (default 60)")
    p.add_argument("--failures-in-a-row", type=int, default=3, metavar="K",
                   help="stop a worker after K of its trials fail in a row on their own (a diverged run, an error of "
                        "the run; default 3). A full disk, a read-only store or a space Optuna cannot sample stops the "
                        "study at once, and never more trials fail than the total")
    p.add_argument("--test-seeds", metavar="S[,S]", help="after the study, train the chosen configuration with these "
                                                         "seeds (by the study's workers) and test it (STS test); the "
                                                         "study itself reads no test set")
    _results_dir_arg(p)
    _data_dir_arg(p)


def cmd_tune(args) -> int:
    from .experiments import chosen_profile
    from .experiments.tuning import Study, check, dashboard, fail_running, parse_space, run

    if args.trials < 1 or args.workers < 1:
        raise ValueError(f"--trials (the study's total) and --workers take 1 or more, got {args.trials} and "
                         f"{args.workers}")
    seeds = _test_seeds(args.test_seeds)
    study = Study(args.preset, chosen_profile(args.profile), parse_space(args.space), args.trials, args.set or [],
                  args.seed, args.results_dir, args.data_dir, args.storage, args.study,
                  (args.heartbeat, 4 * args.heartbeat), args.prune, args.storage_patience, args.failures_in_a_row)
    check(study)  # before the dashboard listens: bad input is one line
    with _terminating():  # SIGTERM stops the study as Ctrl-C does: its trial handed back, one line
        if args.fail_running:
            print(f"{fail_running(study)} running trials marked failed, to run again")
        with dashboard(study, args.dashboard) if args.dashboard else contextlib.nullcontext() as url:
            if url:
                print(f"dashboard: {url}", flush=True)
            trials = run(study, args.workers, args.cluster)
            _print_study(study, trials, args.storage, seeds, args.workers, args.cluster)
            if url:
                return _serve_until_stopped(url)
    return 0


@contextlib.contextmanager
def _terminating():
    """SIGTERM raised as Terminated (a KeyboardInterrupt) while the block runs; the handler before it restored."""
    before = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _test_seeds(text: str | None) -> list[int]:
    try:
        return [int(s) for s in text.split(",")] if text else []
    except ValueError:
        raise ValueError(f"--test-seeds takes whole numbers separated by commas (1,2,3), got {text!r}") from None


def _print_study(study, trials: list[dict], storage: str | None, seeds: list[int], workers: int,
                 cluster: str) -> None:
    """The study's trials, the chosen one, and its test numbers over `seeds` (trained or read after the study, by
    the study's workers)."""
    from .experiments.tuning import chosen, chosen_on_test, trial_table
    from .publish.numbers import over_seeds

    print(f"study {study.name} of {study.preset} on {study.profile} "
          f"({study.storage_url() if storage is None else 'storage given'}): {len(trials)} trials")
    print(trial_table(trials))
    if winner := chosen(trials):
        print(f"chosen: trial {winner['number']}, dev {winner['value']:.4f}: "
              + " ".join(f"{k}={v}" for k, v in winner["params"].items()))
    if seeds:
        scores = [r["metrics"]["sts_test"]["avg"] for r in chosen_on_test(study, seeds, workers=workers,
                                                                            cluster=cluster)]
        mean, std, n = over_seeds(scores)
        spread = f" ± {std:.2f}" if n > 1 else ""  # one seed has no spread
        print(f"test (STS avg, {n} seed{'s' if n > 1 else ''} {seeds}): {mean:.2f}{spread}", flush=True)


def _serve_until_stopped(url: str) -> int:
    """The dashboard stays after the study, for a look at it, until Ctrl-C or SIGTERM: both end the command well."""
    import time

    print(f"the study is done; the dashboard stays at {url} until Ctrl-C", flush=True)
    # Ctrl-C ends it even where this process was started with SIGINT ignored (a job started with & by a script)
    before = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
              signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


COMMANDS = (add_data, add_eval, add_train, add_fit_mlm_head, add_export_st, add_publish, add_report, add_status,
            add_doctor, add_tune)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cse-kit", purpose=PURPOSE)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt as stop:  # every write is atomic and runs resume from their last checkpoint
        return _stopped(args, stop)
    except Exception as error:
        line = _error_line(args, error)
        if line is None:  # not a failure the kit expects: its traceback
            raise
        if _debugging(args):
            traceback.print_exception(error)
        print(f"cse-kit: error: {line}", file=sys.stderr)
        return 2


def _debugging(args) -> bool:
    """--debug given, or $CSE_KIT_DEBUG set to anything but empty or 0."""
    return getattr(args, "debug", False) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _error_line(args, error: Exception) -> str | None:
    """The one line an expected failure is said in; None for any other exception."""
    from .data import DataError
    from .io import WriteFailed
    from .methods.registry import PluginError
    from .models import ModelNotFoundError
    from .train.loop import NonFiniteLoss

    if isinstance(error, WriteFailed):
        resumes = ": it resumes where it stopped" if args.command in ("train", "report") else ""
        return (f"{error}. Free space there (or raise the file size limit, `ulimit -f`) and run the same command "
                f"again{resumes}")
    if isinstance(error, PluginError):  # the researcher's own code failed: where to read its traceback
        return f"{error}" + ("" if _debugging(args) else f" (rerun with --debug or {DEBUG_ENV}=1 for its traceback)")
    if isinstance(error, (DataError, ModelNotFoundError, NonFiniteLoss, KeyError, ValueError, FileNotFoundError,
                          ImportError)):
        return f"{error}"
    if isinstance(error, PermissionError) or (isinstance(error, OSError) and error.errno == errno.EROFS):
        return (f"cannot write {error.filename or 'a file'} ({error.strerror}): choose a folder you can write "
                "(--output-dir, --results-dir, --out, --data-dir) or change its permissions")
    return None


def _stopped(args, stop: KeyboardInterrupt) -> int:
    """Ctrl-C or SIGTERM: said in one line, with what rerunning the command does."""
    if isinstance(stop, Terminated):
        print(f"cse-kit: stopped by SIGTERM; nothing half-written is kept. Rerun the same command to "
              f"{_resumes(args)}.", file=sys.stderr)
        return 128 + signal.SIGTERM
    print(f"\ncse-kit: interrupted; nothing half-written is kept. Rerun the same command to {_resumes(args)}.",
          file=sys.stderr)
    return 130


def _resumes(args) -> str:
    """What rerunning a stopped command does: a training run resumes from its last checkpoint's step."""
    if args.command == "tune":
        return ("continue the study: its finished trials are kept, and a trial stopped midway runs first, its run "
                "resumed from its checkpoint")
    if args.command not in ("train", "report"):
        return "start again"
    if not getattr(args, "run_dir", None):
        return "resume"
    from .io import recover_dir
    from .train.loop import CHECKPOINT, checkpoint_step

    step = checkpoint_step(recover_dir(Path(args.run_dir) / CHECKPOINT))  # stopped in the middle of a swap
    return (f"resume {args.run_dir} from its checkpoint at step {step}" if step is not None else
            f"train {args.run_dir} (it stopped before its first checkpoint: from step 0)")


if __name__ == "__main__":
    sys.exit(main())
