"""DiffAug (Wang & Lu, EMNLP 2022): which run stands behind each row of its Tables 1, 2, 5, 7, 8 and Figures 3, 5,
the notebooks' parameter checks, and the notebooks that reproduce them.

Trained rows are the kit's presets (`diffaug-{semi,semi-aux,sup}-{bert,roberta}`: Table 5's recipe; the `-official`
BERT presets: the official scripts', chosen by the notebooks' `recipe` parameter), so shared rows are trained once:
Table 1's "w/ aux loss" = Table 2's 100% = Table 8's α = 1e-3. SimCSE (unsupervised and supervised) and DiffCSE
are the kit's own presets, trained under the same protocol. The baselines the kit cannot train yet (PromptBERT,
ConSERT, BERT-flow, SBERT, the `_joint` rows) are shown as the paper's numbers, marked as cited."""

from __future__ import annotations

from ..experiments import Row, check
from ..paper import paper_table, paper_tables
from ..train.presets import PRESETS, PROFILES
from .released import released_row

#: notebook -> the DiffAug artefacts it reproduces, in the paper's order (Figures 1-2 are schematics; Tables 3, 4, 6
#: and Figure 4 compare DiffAug with baselines and modules the kit does not have yet)
NOTEBOOKS = {"diffaug_figure3_dynamics": ["Figure 3"], "diffaug_table1_sts": ["Table 1"],
             "diffaug_table2_7_label_fraction": ["Table 2", "Table 7"], "diffaug_table5_hparams": ["Table 5"],
             "diffaug_table8_aux_weight": ["Table 8"], "diffaug_figure5_stage1_steps": ["Figure 5"]}
#: artefact -> the (row, column) of its notebook's comparison the report's coverage matrix quotes
HEADLINES = {"Table 1": ("DiffAug (ours) w/ aux loss", "Avg."), "Table 2": ("2: DiffAug (ours)", "1%"),
             "Table 7": ("7: DiffAug (ours)", "1%"), "Table 5": ("Semi-supervised w/ aux", "stage 1 training steps"),
             "Table 8": ("0.001", "STS-B dev.")}

BACKBONE_LABELS = {"bert": "BERT-base", "roberta": "RoBERTa-base"}
#: the DiffAug recipes a notebook can train (`recipe` parameter): preset suffix per recipe; the official scripts
#: exist for BERT only
RECIPES = {"paper": "", "official-code": "-official"}
#: backbone -> the label-fraction table (Table 2: BERT, Table 7: RoBERTa)
FRACTION_TABLES = {"bert": 2, "roberta": 7}
FRACTIONS = [0.01, 0.1, 1.0]
#: the paper's subsets per low-data fraction (1% and 10%: five random subsets, each trained with every seed)
PAPER_SUBSETS = 5
#: Table 8's α (None: no auxiliary loss)
AUX_WEIGHTS = [None, 1e-4, 1e-3, 1e-2, 1e-1]
#: Figure 5's stage-1 lengths (the paper does not list its grid: papers.md §5.4) and their stand-ins off `paper`,
#: where a stage-1 step costs the same but the stage-2 run is a few steps: the shape, not the scale
STAGE1_GRIDS = {"paper": [500, 1000, 1500, 2000, 2500, 3000, 4000], "cpu": [2, 4, 8, 12, 16],
                "smoke": [2, 4, 8]}
#: off `paper`, the 1% subset of the profile's NLI triplets (SNLI dev + test, about 5.9k: 59) must hold a batch
SMALL_FRACTION_BATCH = {"cpu": 32}


def check_recipe(recipe: str, backbones: list) -> None:
    check(recipe in RECIPES, f"unknown DiffAug recipe {recipe!r}; choose one of: {', '.join(RECIPES)}")
    check(recipe == "paper" or backbones == ["bert"], f"the {recipe} recipe exists for BERT only (the official "
          "scripts train BERT): run it with backbone='bert'")


def check_backbones(backbones: list) -> None:
    check(set(backbones) <= set(BACKBONE_LABELS), f"backbones are {list(BACKBONE_LABELS)}, got {backbones}")


def check_fractions(fractions: list) -> None:
    bad = [f for f in fractions if not isinstance(f, (int, float)) or not 0 < f <= 1]
    check(not bad, f"label fractions lie in (0, 1] (0.01 for 1%), got {bad}")


def check_aux_weights(weights: list) -> None:
    bad = [w for w in weights if w is not None and (not isinstance(w, (int, float)) or w <= 0)]
    check(not bad, f"α is a positive number (or None: no auxiliary loss), got {bad}")


def check_stage1_steps(steps: list) -> None:
    bad = [k for k in steps if not isinstance(k, int) or k < 1]
    check(not bad, f"stage-1 lengths are positive integers, got {bad}")


def preset(setting: str, backbone: str = "bert", recipe: str = "paper") -> str:
    """diffaug-<setting>-<backbone>[-official]; setting: semi, semi-aux or sup."""
    return f"diffaug-{setting}-{backbone}{RECIPES[recipe]}"


def _backbone_row(label: str, pooler: str, profile: str) -> Row:
    unavailable = PROFILES[profile].get("unavailable", {})
    if "bert" in unavailable:
        return Row(label, unavailable=unavailable["bert"])
    return Row(label, model=PROFILES[profile]["backbones"]["bert"][0], pooler=pooler)


def table1_rows(profile: str, recipe: str = "paper") -> list[Row]:
    """STS test, BERT-base: the untrained backbone ([CLS] and mean pooling, as the ♢ rows), unsupervised SimCSE and
    DiffCSE as the kit trains them, DiffAug semi-supervised (w/o and w/ aux) and supervised (ours, and the authors'
    released checkpoints on `paper`), supervised SimCSE. Rows the kit cannot train are `literature(1)`."""
    return [_backbone_row("BERT ([CLS])", "cls_before_pooler", profile),
            _backbone_row("BERT (Mean Pooling)", "avg", profile),
            Row("SimCSE", "simcse-bert"), Row("DiffCSE", "diffcse-bert-sts"),
            Row("DiffAug (ours)", preset("semi", recipe=recipe)),
            released_row("Tianduo/diffaug-semisup-bert-base-uncased", "DiffAug (ours) w/ aux loss", profile),
            Row("DiffAug (ours) w/ aux loss", preset("semi-aux", recipe=recipe)),
            Row("SimCSE (supervised)", "simcse-sup-bert"),
            released_row("Tianduo/diffaug-sup-bert-base-uncased", "DiffAug (ours) (supervised)", profile),
            Row("DiffAug (ours) (supervised)", preset("sup", recipe=recipe))]


def label_subsets(profile: str, subsets: int | None) -> int:
    """Random subsets per low-data fraction: the paper's five on `paper`, one elsewhere, unless given."""
    chosen = subsets if subsets is not None else (PAPER_SUBSETS if profile == "paper" else 1)
    check(isinstance(chosen, int) and chosen >= 1, f"subsets is a positive integer, got {subsets}")
    return chosen


def fraction_label(fraction: float) -> str:
    """0.01 -> '1%', the paper's column."""
    return f"{100 * fraction:g}%"


def fraction_rows(backbone: str, fraction: float, subsets: int, profile: str, recipe: str = "paper") -> list[Row]:
    """Tables 2 and 7, one column: DiffAug semi-supervised (w/ aux, as the paper's rows), supervised SimCSE and
    supervised DiffAug trained on `fraction` of the NLI triplets, each on `subsets` random subsets (nli_subset = the
    subset's seed; 100% has one). Every subset's runs share the row's label, so its mean is over subsets x seeds.
    Off `paper`, the fraction is of the profile's NLI triplets, and the batches shrink where the 1% would not
    hold one (SMALL_FRACTION_BATCH, said in the notebook)."""
    small = SMALL_FRACTION_BATCH.get(profile)
    runs = {"DiffAug (ours)": preset("semi-aux", backbone, recipe), "SimCSE": f"simcse-sup-{backbone}",
            "DiffAug (ours) (supervised)": preset("sup", backbone, recipe)}
    if fraction == 1:
        return [Row(label, name) for label, name in runs.items()]
    rows = []
    for label, name in runs.items():
        overrides, settings = {"nli_fraction": fraction}, PRESETS[name][1]
        if small and settings["data"] == "NLI":
            overrides["batch_size"] = small
        if small and settings["method"] == "diffaug":
            overrides["nli_batch_size"] = small
        rows += [Row(label, name, {**overrides, "nli_subset": subset}) for subset in range(subsets)]
    return rows


def table5_rows(recipe: str = "paper", profile: str = "paper") -> dict[str, dict]:
    """Table 5 from the presets, in the paper's columns: what `recipe` runs on `profile` (the paper profile: the
    recipe itself; others: the profile's stand-in sizes, cse_kit.train.presets.PROFILES)."""
    from ..train.presets import build_config

    out = {}
    for label, setting in (("Semi-supervised w/o aux", "semi"), ("Semi-supervised w/ aux", "semi-aux"),
                           ("Supervised (w/o aux)", "sup")):
        cfg = build_config(preset(setting, recipe=recipe), profile)
        out[label] = {"stage 1 learning rate": cfg.stage1_lr, "stage 1 batch size": cfg.nli_batch_size,
                      "stage 1 training steps": cfg.stage1_steps, "stage 2 learning rate": cfg.lr,
                      "stage 2 batch size": cfg.batch_size, "stage 2 epochs": cfg.epochs}
    return out


def aux_label(weight: float | None) -> str:
    """Table 8's column of α: 'no aux loss' or '0.001'."""
    return "no aux loss" if weight is None else f"{weight:g}"


def table8_rows(weights: list, recipe: str = "paper") -> list[Row]:
    """STS-B dev by α: no auxiliary loss is the w/o-aux preset (2000 stage-1 steps: the paper's 86.2 is Table 3's
    "Prefix (different)"), every α the w/-aux preset (1500 stage-1 steps) with that α."""
    return [Row(aux_label(w), preset("semi", recipe=recipe)) if w is None else
            Row(aux_label(w), preset("semi-aux", recipe=recipe), {"aux_weight": w}) for w in weights]


def stsb_dev_column(record: dict) -> dict:
    """Table 8's one column: STS-B dev of the run's best checkpoint."""
    return {"STS-B dev.": record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]}


def stage1_grid(profile: str, steps: list | None) -> list[int]:
    chosen = list(steps) if steps else STAGE1_GRIDS[profile]
    check_stage1_steps(chosen)
    return chosen


def figure5_rows(steps: list[int], snapshot_steps: int, recipe: str = "paper") -> list[Row]:
    """The w/o-aux semi-supervised recipe (the paper's best, 2000, is its Table 5 value) with each stage-1 length;
    every run snapshots its prefixes every `snapshot_steps` stage-1 steps, so the longest one is Figure 3's run."""
    return [Row(str(k), preset("semi", recipe=recipe), {"stage1_steps": k, "stage1_snapshot_steps": snapshot_steps})
            for k in steps]


def snapshot_every(steps: list[int], points: int = 20) -> int:
    """Snapshot interval giving about `points` points over the longest stage 1 (the paper plots ~100-step spacing
    over 4000 steps; [I])."""
    return max(1, max(steps) // points)


def stage1_loss(record: dict) -> float:
    """The stage-1 cross-entropy at the end of stage 1: the mean of the logged stage-1 losses over its last tenth."""
    losses = [r["loss"] for r in record["train_curve"] if r.get("stage") == 1 and "loss" in r]
    tail = losses[-max(1, len(losses) // 10):]
    return sum(tail) / len(tail)


def literature(table: int) -> "pd.DataFrame":  # noqa: F821
    """The paper's rows the kit does not train (other papers' numbers, marked ♢ ♡ ♣, and the baselines of the next
    issue: PromptBERT, ConSERT, the `_joint` strategies), shown as published, with where they come from."""
    frame = paper_table(table, "diffaug")
    marks = paper_tables("diffaug")[str(table)].get("marks") or {}
    ours = {"SimCSE", "DiffCSE", "SimCSE (supervised)", "BERT ([CLS])", "BERT (Mean Pooling)"} if table == 1 else {
        "SimCSE"}
    cited = [label for label in frame.index if not label.startswith("DiffAug") and label not in ours]
    sources = [marks.get(label) or "the original paper (not trained by the kit yet)" for label in cited]
    return frame.loc[cited].assign(source=sources)


def dynamics_sentences(data_dir, count: int) -> list[str]:
    """Figure 3's inputs (the paper leaves them open; [I]): the first `count` distinct STS-B dev sentences."""
    from ..data import load_sts

    check(isinstance(count, int) and count >= 1, f"sentences is a positive number of STS-B dev sentences, got {count}")
    pairs = load_sts("STSBenchmark", "dev", data_dir)
    return list(dict.fromkeys(s for p in pairs for s in (p.sent1, p.sent2)))[:count]


def stage1_curves(record: dict, store, sentences: list[str]) -> dict:
    """δ, κ and the stage-1 loss at each of a run's stage-1 snapshots, and the dropout reference δ, measured on its
    base encoder (stage 1 leaves it frozen); cached in the run's folder (cse_kit.eval.prefix_dynamics)."""
    from ..eval.prefix_dynamics import stage1_dynamics
    from ..train.loop import load_encoder

    cfg = record["config"]
    tokenizer, encoder = load_encoder(cfg["model"])
    return stage1_dynamics(store.run_dir(record["key"]), encoder, tokenizer, cfg["template"], cfg["prefix_len"],
                           sentences, seed=record["seed"], max_seq_length=cfg["max_seq_length"])


#: Figure 3's reference row: two dropout views of each sentence, no prefix (SimCSE's augmentation)
DROPOUT_ROW = "dropout (SimCSE)"


def figure3_long(curves_by_seed: dict[int, dict]) -> "pd.DataFrame":  # noqa: F821
    """One line per (snapshot step, seed) with δ and κ, and the dropout reference's δ per seed, in run_rows' layout."""
    import pandas as pd

    lines = [{"row": str(p["step"]), "seed": seed, "status": "ok", "reason": "", "δ": p["delta"], "κ": p["kappa"]}
             for seed, curves in curves_by_seed.items() for p in curves["points"]]
    lines += [{"row": DROPOUT_ROW, "seed": seed, "status": "ok", "reason": "", "δ": curves["dropout_delta"]}
              for seed, curves in curves_by_seed.items()]
    return pd.DataFrame(lines)
