"""What a `mini` run costs on this machine, from same-shaped random-weight stand-ins of its miniatures (issue 56:
the whole mini report in a working day on an 8-core CPU; the arithmetic is in docs/notebooks.md, "The mini profile").

  python bench/mini_budget.py [--steps 12] [--methods simcse-bert,diffcse-bert-sts,...] [--eval]
                              [--standins DIR] [--threads N]
      # each preset on the mini profile (its batch, length, precision; its miniatures written as stand-ins, or read
      # from DIR) trained for --steps steps: seconds per training step, and the seconds of one STS-B dev evaluation;
      # --eval also times the papers' STS test and transfer test (SentEval `test`) of the BERT-Mini stand-in: encoding
      # and classifiers apart
  python bench/mini_budget.py --plan RESULTS_DIR [--step-s simcse=0.95,...] [--eval-s sts_test=20,...]
      # the mini report's runs from a mini-rehearsal report's store (the same notebooks and rows, at the smoke
      # profile's sizes): each run rebuilt on mini (its overrides kept), its steps counted on mini's data, times the
      # mini seeds, plus the mini grids' extra points; then its training steps, dev evaluations and final
      # evaluations in seconds from the per-step and per-evaluation times given (measured by the first command)

The timings do not depend on the weights (same shapes, same sentences, same lengths), so they hold for the real
miniatures. Wall times depend on the machine's load: run it idle, and name the CPU beside the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from cse_kit.eval import Encoder
from cse_kit.eval.runner import evaluate
from cse_kit.models import load_encoder
from cse_kit.models.standins import write_standin
from cse_kit.train import build_config, train
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
    stage1, main = steps_of(cfg)
    return {"train_s_per_step": seconds["train"] / summary["steps"], "steps": summary["steps"],
            "dev_eval_s": seconds["eval"], "precision": summary["mixed_precision"], "mini_steps": stage1 + main}


def time_evaluation(model_dir: str) -> dict:
    tokenizer, model = load_encoder(model_dir)
    encoder = Encoder(model, tokenizer, "cls_before_pooler", progress=False)
    out = {}
    for tasks in ("sts", "transfer"):
        encoder.clear()  # each part timed as if alone: no sentence encoded before
        result = evaluate(encoder, tasks, "test")
        t = result["timings"]
        out[tasks] = {"total_s": t["total_s"], "encode_s": t["encode_s"],
                      "classifier_s": t["transfer_classifier_s"], "sentences": t["distinct_sentences"]}
    return out


def mini_config(record: dict):
    """The mini profile's run behind a mini-rehearsal record: its preset with the record's own overrides (what
    differs from the preset on mini-rehearsal, the seed aside)."""
    preset = record["subject"]["preset"]
    base = build_config(preset, "mini-rehearsal").to_dict()
    overrides = {k: v for k, v in record["subject"].items() if k in base and base[k] != v and k != "seed"}
    sized = set(PROFILES["smoke"]["settings"]) | {k for m in PROFILES["smoke"]["method_settings"].values() for k in m}
    return build_config(preset, "mini", {k: v for k, v in overrides.items() if k not in sized})


def steps_of(cfg, data_dir=None) -> tuple[int, int]:
    """(stage-1 steps, main steps) of a run, counted as the training loop counts them."""
    from cse_kit.train.data import load_examples

    examples = len(load_examples(cfg.data, data_dir, cfg.max_examples))
    main = -(-examples // cfg.batch_size) // cfg.gradient_accumulation * cfg.epochs
    main = min(main, cfg.max_steps) if cfg.max_steps else main
    return (cfg.stage1_steps if cfg.method == "diffaug" or cfg.semi_strategy != "none" else 0), main


def _alpha_runs(profile: str) -> set[str]:
    """The distinct runs of DiffAug's α-swept rows (Table 1's ConSERT_joint, Table 6, the joint selection of Tables
    2 and 7) on a profile's α grid."""
    from cse_kit.papers import diffaug

    rows = (diffaug.table1_rows(profile)[0] + diffaug.table6_rows(diffaug.ALPHA_GRIDS[profile])[0]
            + diffaug.joint_selection_rows("bert", profile)[0])
    return {json.dumps([row.preset, row.overrides], sort_keys=True) for row in rows if row.preset}


def plan(results_dir: Path, step_s: dict, eval_s: dict, data_dir=None) -> None:
    from collections import Counter

    from cse_kit.papers import comparison, diffaug

    records = [json.loads(p.read_text()) for p in sorted((results_dir / "records").glob("*.json"))]
    runs, evaluations = {}, Counter()
    for record in records:
        if not record["subject"].get("preset"):
            evaluations["pretrained " + "+".join(sorted(record["metrics"]))] += 1
            continue
        cfg = mini_config(record)
        runs[_unseeded(cfg)] = (cfg, tuple(sorted(record["metrics"])))
    seeds = len(PROFILES["mini"]["report"]["seeds"])
    # the head-to-head's runs have its own seeds (comparison.SEEDS), the tables' the profile's
    # (its shared recipe is the smoke profile's sizes in the rehearsal, so its runs are taken from its rows on mini)
    head_to_head = {}
    for row in comparison.rows("mini"):
        if row.preset:
            cfg = row.subject("mini", 0)
            head_to_head[_unseeded(cfg)] = cfg
    for key, cfg in head_to_head.items():
        runs.setdefault(key, (cfg, ("sts_pairs", "sts_test")))
    extra = {"DiffAug Figure 5 stage-1 grid": len(diffaug.STAGE1_GRIDS["mini"]) - len(diffaug.STAGE1_GRIDS["smoke"]),
             "DiffAug Figure 4 prefix grid": len(diffaug.PREFIX_GRIDS["mini"]) - len(diffaug.PREFIX_GRIDS["smoke"]),
             "DiffAug Tables 1, 2-7, 6 α grid": len(_alpha_runs("mini") - _alpha_runs("mini-rehearsal"))}
    total = Counter()
    by_method = Counter()
    for key, (cfg, metrics) in runs.items():
        seeds = len(comparison.SEEDS["mini"]) if key in head_to_head else len(PROFILES["mini"]["report"]["seeds"])
        stage1, main = steps_of(cfg)
        train = (stage1 + main) * step_s.get(cfg.method, step_s["default"])
        dev = main // cfg.eval_steps * eval_s[cfg.metric.startswith("transfer") and "transfer_dev" or "sts_dev"]
        final = sum(eval_s.get(m, 0) for m in metrics)
        total.update({"training": train * seeds, "dev evaluations": dev * seeds, "final evaluations": final * seeds})
        by_method[cfg.method] += seeds
    per_run = sum(total.values()) / sum(by_method.values())
    seeds = len(PROFILES["mini"]["report"]["seeds"])
    extra_runs = sum(extra.values()) * seeds
    total["grid extras (at the mean run's cost)"] = extra_runs * per_run
    pretrained = sum(evaluations.values()) * eval_s.get("sts_test", 0)
    total["untrained starts and released rows (STS test each)"] = pretrained
    print(f"{len(runs)} distinct runs (the rehearsal store's and the head-to-head's rows on mini: "
          f"{len(head_to_head)} of the head-to-head x {len(comparison.SEEDS['mini'])} seeds, the rest x {seeds}) = {sum(by_method.values())} mini runs "
          f"({', '.join(f'{m} {n}' for m, n in by_method.most_common())}); grid extras {extra_runs} "
          f"({'; '.join(f'{k} +{v}' for k, v in extra.items())} per seed); {sum(evaluations.values())} pretrained "
          "evaluations")
    for what, seconds in total.items():
        print(f"  {what:<52} {seconds / 3600:6.2f} h")
    print(f"  {'total on the machine the times were measured on':<52} {sum(total.values()) / 3600:6.2f} h")


def _unseeded(cfg) -> str:
    return json.dumps({**cfg.to_dict(), "seed": None}, sort_keys=True, default=str)


def _seconds(text: str) -> dict:
    return {k: float(v) for k, v in (part.split("=") for part in text.split(",") if part)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--eval", action="store_true")
    parser.add_argument("--standins")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--plan", type=Path)
    parser.add_argument("--step-s", default="", help="method=seconds per training step, and default=...")
    parser.add_argument("--eval-s", default="", help="sts_dev=..,transfer_dev=..,sts_test=..,transfer_test=.. seconds")
    args = parser.parse_args()
    if args.plan:
        plan(args.plan, _seconds(args.step_s), _seconds(args.eval_s))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = standins(Path(args.standins) if args.standins else root / "standins")
        print(f"{torch.get_num_threads()} threads; mini runs are {MINI_STEPS} steps of 64 (Wiki1M's first 11,913 "
              "sentences)")
        print(f"{'preset':<22} {'s/step':>7} {'precision':>9} {'dev eval s':>10} {'s/mini run of training':>18}")
        per_step = {}
        for preset in args.methods.split(","):
            timing = time_method(preset, models, args.steps, root)
            per_step[preset] = timing["train_s_per_step"]
            print(f"{preset:<22} {timing['train_s_per_step']:>7.3f} {timing['precision']:>9} "
                  f"{timing['dev_eval_s'] / max(1, timing['steps'] // args.steps):>10.1f} "
                  f"{timing['train_s_per_step'] * timing['mini_steps']:>18.0f}")
        print(f"median s/step over the methods: {statistics.median(per_step.values()):.3f}")
        if args.eval:
            for tasks, t in time_evaluation(models[PROFILES["mini"]["backbones"]["bert"][0]]).items():
                print(f"{tasks} test: {t['total_s']:.0f} s ({t['encode_s']:.0f} s encoding {t['sentences']:,} "
                      f"sentences, {t['classifier_s']:.0f} s classifiers)")


if __name__ == "__main__":
    main()
