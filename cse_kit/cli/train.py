"""`cse-kit train`, `fit-mlm-head` and `export-st`: a preset trained on a profile, a DiffCSE generator fitted, a trained
model saved for sentence-transformers."""

from __future__ import annotations

import contextlib
import os
import signal
from functools import partial
from pathlib import Path

from ..experiments import chosen_profile
from ..methods.mlm_head import fit_mlm_head
from ..models import FITTED_MLM, fitted_mlm_dir
from ..results import ResultStore
from ..train import PRESETS, build_config, export_sentence_transformers, train
from ..train.launch import join_srun_step
from ..train.checkpoint import resume_words
from ..train.loop import TrainingStopped
from ..train.preemption import slurm_training
from ..train.presets import PROFILES
from ..train.tracking import watch_commands
from .common import command, data_dir_arg, log_with_arg, results_dir_arg, resumable, signals_restored, terminating


def add_train(sub) -> None:
    p = command(sub, "train", cmd_train,
                 epilog="settings for --set: the fields of cse_kit.train.TrainConfig, e.g. --set lam=0.01 "
                        "--set mask_ratio=0.15 --set generator_output=sample --set batch_size=128")
    p.add_argument("--preset", required=True, choices=list(PRESETS))
    p.add_argument("--profile", default="auto", choices=["auto", *PROFILES],
                   help="paper: the papers' models and Wiki1M (GPU, Hub); mini: Google's masked-LM BERT miniatures "
                        "with the papers' recipes (Hub once); cpu: all-MiniLM-L6-v2 on the local Wiki1M sample; "
                        "smoke: tiny random models, seconds; mini-rehearsal: mini's models at smoke's sizes; auto "
                        "(default, as the notebooks): paper with a CUDA GPU, else mini where its models are cached or "
                        "the Hub answers, else cpu")
    results_dir_arg(p, "the results store the run trains into, under the key the notebooks ask for it by, so the "
                       "notebooks, the report, `cse-kit status` and `publish` find it and nothing trains it twice "
                       "(its folder: <results dir>/runs/<key>/)")
    p.add_argument("--output-dir", help="train into this folder of your own instead, outside the results store "
                                        "(the notebooks and `cse-kit status` do not see it)")
    p.add_argument("--seed", type=int, help="default: in the results store, the profile's first notebook seed (42; "
                                            "smoke 1), so a notebook reuses the run; with --output-dir, 42")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="any other setting (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    log_with_arg(p)
    p.add_argument("--resume-with-changes", action="store_true",
                   help="resume a checkpoint although settings that change training differ (lr, schedule length, ...): "
                        "they apply from the checkpoint's step on, and are recorded in summary.json")
    data_dir_arg(p)


def cmd_train(args) -> int:
    join_srun_step()  # under `srun --ntasks N`, the N tasks train one run together
    profile = chosen_profile(args.profile)
    given = _set_names(args)
    own_folder = args.output_dir is not None or "output_dir" in given
    if not own_folder and args.resume_with_changes:
        raise ValueError("--resume-with-changes resumes a run folder of your own: give its --output-dir (in the "
                         "results store a changed setting is another run, under a key of its own)")
    if not own_folder and args.seed is None and "seed" not in given:  # a notebook's first: reused
        args.seed = PROFILES[profile]["report"]["seeds"][0]
    cfg = build_config(args.preset, profile, _train_overrides(args))
    store = None if own_folder else ResultStore(args.results_dir, args.data_dir, progress=not args.no_progress,
                                                notify=partial(print, flush=True))
    run = Path(cfg.output_dir) if store is None else store.run_dir(store.key(cfg))
    # in a SLURM job SIGTERM and SIGUSR2 stop the run after its current step, at a checkpoint, and it is requeued;
    # elsewhere SIGTERM stops it as Ctrl-C does
    with signals_restored(signal.SIGTERM, signal.SIGUSR2), resumable(lambda: resume_words(run)):
        preemption = slurm_training()
        with terminating() if preemption is None else contextlib.nullcontext():
            try:
                if store is None:
                    summary = train(cfg, progress=not args.no_progress, resume_with_changes=args.resume_with_changes)
                else:
                    summary = _train_in_store(store, cfg, progress=not args.no_progress)
            except TrainingStopped as stopped:
                preemption.leave(f"{stopped}")
    if summary is None:  # a second process of a multi-process run: the first says where the run is
        return 0
    print(f"best {summary['metric']} {summary['best']:.2f} at step {summary['best_step']} of {summary['steps']}; "
          f"model: {summary['model']}")
    if store is None:
        print(f"{run} is a folder of your own, outside the results store: the notebooks, the report and `cse-kit "
              "status` do not see it (leave --output-dir out to train into the store)")
    else:
        print(f"results store {store.root}: record {run.name}, run folder {run} (`cse-kit status` lists it; a "
              "notebook asking for this run reuses it)")
    print(f"evaluate it: cse-kit eval --model {summary['model']} --tasks sts --mode test")
    for line in watch_commands(run):
        print(f"watch its curves: {line}")
    return 0


def _train_in_store(store: ResultStore, cfg, progress: bool) -> dict | None:
    """Train cfg as the results store's run of its key (or reuse it, finished), returning what train() returns; None
    on the processes of a multi-process run but its first, which holds the key's lock and writes the record while
    they train with it into the same folder."""
    key = store.key(cfg)
    if not store.has_key(key, ()):
        if int(os.environ.get("RANK", "0")) != 0:
            train(cfg.replace(output_dir=str(store.run_dir(key)), data_dir=store.data_dir), progress=progress)
            return None
        store.get(cfg, ())
    elif int(os.environ.get("RANK", "0")) != 0:
        return None
    else:
        print(f"the results store holds this run already, trained (record {key}): nothing to train")
    record = store.read(key)
    return {**record["train"], "model": str(store.run_dir(key) / "model")}


def _set_names(args) -> set[str]:
    """The settings --set gives (`--set output-dir=...` names output_dir)."""
    return {o.partition("=")[0].strip().replace("-", "_") for o in args.set or ()}


def _train_overrides(args) -> list[str]:
    out = list(args.set or [])
    for name in ("output_dir", "seed", "data_dir", "max_steps", "log_with"):
        if getattr(args, name) is not None:
            out.append(f"{name}={getattr(args, name)}")
    return out


def add_fit_mlm_head(sub) -> None:
    p = command(sub, "fit-mlm-head", cmd_fit_mlm_head)
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--output", help="where to save it (default for all-MiniLM-L6-v2: <data dir>/models/"
                                    "all-MiniLM-L6-v2-mlm, found by that name)")
    p.add_argument("--corpus", default="Wiki1M-sample")
    p.add_argument("--steps", type=int, default=300)
    data_dir_arg(p)


def cmd_fit_mlm_head(args) -> int:
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
    p = command(sub, "export-st", cmd_export_st)
    p.add_argument("model_dir")
    p.add_argument("output")
    p.add_argument("--pooler", help="default: from the model's cse_kit.json")


def cmd_export_st(args) -> int:
    print(f"wrote {export_sentence_transformers(args.model_dir, args.output, args.pooler)}")
    return 0
