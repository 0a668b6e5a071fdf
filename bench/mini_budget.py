"""What a `mini` run costs on this machine, from same-shaped random-weight stand-ins of its miniatures (issue 56:
the whole mini report in a working day on an 8-core CPU; the arithmetic is in docs/notebooks.md, "The mini profile").

  python bench/mini_budget.py [--steps 12] [--methods simcse-bert,diffcse-bert-sts,...] [--eval]
                              [--standins DIR] [--threads N]
      # each preset on the mini profile (its batch, length, precision; its miniatures written as stand-ins, or read
      # from DIR) trained for --steps steps: seconds per training step, and the seconds of one STS-B dev evaluation;
      # --eval also times the papers' STS test and transfer test (SentEval `test`) of the BERT-Mini stand-in: encoding
      # and classifiers apart

The timings do not depend on the weights (same shapes, same sentences, same lengths), so they hold for the real
miniatures. Wall times depend on the machine's load: run it idle, and name the CPU beside the figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from cse_kit.eval import Encoder
from cse_kit.eval.runner import evaluate
from cse_kit.models.standins import write_standin
from cse_kit.train import build_config, train
from cse_kit.train.loop import load_encoder
from cse_kit.train.presets import PROFILES

METHODS = ("simcse-bert", "diffcse-bert-sts", "scd-bert", "esimcse-bert", "promptbert-bert", "consert-bert",
           "diffaug-semi-bert")
#: the mini profile's steps a run (Wiki1M's first 11,913 sentences in batches of 64, one epoch)
MINI_STEPS = -(-11913 // 64)


def standins(folder: Path) -> dict[str, str]:
    """The mini profile's BERT-base stand-in and its generator, written once into folder."""
    out = {}
    for ref in PROFILES["mini"]["backbones"]["bert"]:
        target = folder / ref.replace("/", "--")
        if not (target / "config.json").is_file():
            write_standin(ref, target)
        out[ref] = str(target)
    return out


def time_method(preset: str, models: dict[str, str], steps: int, root: Path) -> dict:
    cfg = build_config(preset, "mini")
    overrides = {"model": models[cfg.model], "generator": models.get(cfg.generator, cfg.generator),
                 "max_steps": steps, "eval_steps": steps, "output_dir": str(root / preset), "save_steps": None}
    if cfg.method == "diffaug":
        overrides["stage1_steps"] = steps
    summary = train(build_config(preset, "mini", overrides), progress=False, announce=lambda line: None)
    seconds = summary["seconds"]
    return {"train_s_per_step": seconds["train"] / summary["steps"], "steps": summary["steps"],
            "dev_eval_s": seconds["eval"], "precision": summary["mixed_precision"]}


def time_evaluation(model_dir: str) -> dict:
    tokenizer, model = load_encoder(model_dir)
    encoder = Encoder(model, tokenizer, "cls_before_pooler", progress=False)
    out = {}
    for tasks in ("sts", "transfer"):
        result = evaluate(encoder, tasks, "test")
        encoder.cache.clear() if hasattr(encoder, "cache") else None
        t = result["timings"]
        out[tasks] = {"total_s": t["total_s"], "encode_s": t["encode_s"],
                      "classifier_s": t["transfer_classifier_s"], "sentences": t["distinct_sentences"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--eval", action="store_true")
    parser.add_argument("--standins")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = standins(Path(args.standins) if args.standins else root / "standins")
        print(f"{torch.get_num_threads()} threads; mini runs are {MINI_STEPS} steps of 64 (Wiki1M's first 11,913 "
              "sentences)")
        print(f"{'preset':<22} {'s/step':>7} {'precision':>9} {'dev eval s':>10} {'s/run of training':>18}")
        per_step = {}
        for preset in args.methods.split(","):
            timing = time_method(preset, models, args.steps, root)
            per_step[preset] = timing["train_s_per_step"]
            print(f"{preset:<22} {timing['train_s_per_step']:>7.3f} {timing['precision']:>9} "
                  f"{timing['dev_eval_s'] / max(1, timing['steps'] // args.steps):>10.1f} "
                  f"{timing['train_s_per_step'] * MINI_STEPS:>18.0f}")
        print(f"median s/step over the methods: {statistics.median(per_step.values()):.3f}")
        if args.eval:
            for tasks, t in time_evaluation(models[PROFILES["mini"]["backbones"]["bert"][0]]).items():
                print(f"{tasks} test: {t['total_s']:.0f} s ({t['encode_s']:.0f} s encoding {t['sentences']:,} "
                      f"sentences, {t['classifier_s']:.0f} s classifiers)")


if __name__ == "__main__":
    main()
