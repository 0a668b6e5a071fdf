"""DiffAug (Wang & Lu, EMNLP 2022): which run stands behind each row of its Tables 1, 2, 5, 7, 8 and Figures 3, 5,
the notebooks' parameter checks, and the notebooks that reproduce them.

Trained rows are the kit's presets (`diffaug-{semi,semi-aux,sup}-{bert,roberta}`: Table 5's recipe; the `-official`
BERT presets: the official scripts', chosen by the notebooks' `recipe` parameter), so shared rows are trained once:
Table 1's "w/ aux loss" = Table 2's 100% = Table 8's α = 1e-3. The baselines are the kit's own methods under the
same protocol: SimCSE (unsupervised and supervised), DiffCSE, PromptBERT, ConSERT, and their semi-supervised
strategies (Appendix C: `semi_strategy`, cse_kit.methods.semi), the `_joint` rows at the α chosen on STS-B dev, as
the paper chose it; shared with Table 6. Rows from other pipelines (BERT-flow, SBERT) stay the paper's numbers,
marked as cited."""

from __future__ import annotations

import math

from ..experiments import Row, check, sts_test_columns, training_cost
from ..data.published import paper_table, paper_tables
from ..train.presets import PRESETS, PROFILES, per_profile, sizing
from .released import released_row

#: notebook -> the DiffAug artefacts it reproduces, in the paper's order (Figures 1-2 are schematics)
NOTEBOOKS = {"diffaug_figure3_dynamics": ["Figure 3"], "diffaug_table1_sts": ["Table 1"],
             "diffaug_table2_7_label_fraction": ["Table 2", "Table 7"], "diffaug_table3_modules": ["Table 3"],
             "diffaug_figure4_prefix_length": ["Figure 4"], "diffaug_table4_cost": ["Table 4"],
             "diffaug_table5_hparams": ["Table 5"], "diffaug_table6_semi_baselines": ["Table 6"],
             "diffaug_table8_aux_weight": ["Table 8"], "diffaug_figure5_stage1_steps": ["Figure 5"]}
#: artefact -> the (row, column) of its notebook's comparison the report's coverage matrix quotes
HEADLINES = {"Table 1": ("DiffAug (ours) w/ aux loss", "Avg."), "Table 2": ("2: DiffAug (ours)", "1%"),
             "Table 7": ("7: DiffAug (ours)", "1%"), "Table 5": ("Semi-supervised w/ aux", "stage 1 training steps"),
             "Table 8": ("0.001", "STS-B dev."), "Table 6": ("ConSERT_joint", "Avg."),
             "Table 4": ("DiffAug (ours)", "Training time"), "Table 3": ("Prefix (different, ours)", "STS-B dev.")}

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
#: Figure 5's stage-1 lengths (App. E and Figure 5 do not list the grid: ours) and their stand-ins off `paper`,
#: where a stage-1 step costs the same but the stage-2 run is a few steps: the shape, not the scale
STAGE1_GRIDS = per_profile({"paper": [500, 1000, 1500, 2000, 2500, 3000, 4000], "cpu": [2, 4, 8, 12, 16],
                             "mini": [24, 48, 72, 96, 120, 144, 186], "smoke": [2, 4, 8]})
#: off `paper`, the 1% subset of the profile's NLI triplets (SNLI dev + test, about 5.9k: 59) must hold a batch
SMALL_FRACTION_BATCH = {"cpu": 32, "mini": 32}


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


def table1_rows(profile: str, recipe: str = "paper", alphas: list | None = None) -> tuple[list[Row], dict]:
    """STS test, BERT-base: the untrained backbone ([CLS] and mean pooling, as the ♢ rows), the unsupervised baselines
    as the kit trains them (ConSERT, SimCSE, PromptBERT, DiffCSE), ConSERT_joint (α chosen on STS-B dev among
    `alphas`: the candidate rows and their groups, for experiments.best_on_dev), DiffAug semi-supervised (w/o and
    w/ aux) and supervised (ours, and the authors' released checkpoints on `paper`), supervised SimCSE and
    PromptBERT. Rows from other pipelines are `literature(1)`."""
    joint, groups = strategy_rows("ConSERT", "consert-bert", "joint", alpha_grid(profile, alphas))
    rows = [_backbone_row("BERT ([CLS])", "cls_before_pooler", profile),
            _backbone_row("BERT (Mean Pooling)", "avg", profile),
            Row("ConSERT", "consert-bert"), Row("SimCSE", "simcse-bert"), Row("PromptBERT", "promptbert-bert"),
            Row("DiffCSE", "diffcse-bert-sts"), *joint,
            Row("DiffAug (ours)", preset("semi", recipe=recipe)),
            released_row("Tianduo/diffaug-semisup-bert-base-uncased", "DiffAug (ours) w/ aux loss", profile),
            Row("DiffAug (ours) w/ aux loss", preset("semi-aux", recipe=recipe)),
            Row("SimCSE (supervised)", "simcse-sup-bert"), Row("PromptBERT (supervised)", "promptbert-sup-bert"),
            released_row("Tianduo/diffaug-sup-bert-base-uncased", "DiffAug (ours) (supervised)", profile),
            Row("DiffAug (ours) (supervised)", preset("sup", recipe=recipe))]
    return rows, groups


# --- the semi-supervised baselines (Appendix C, Tables 2, 6, 7) ---------------------------------------------------
#: backbone -> the paper's name of each baseline -> the kit's unsupervised preset the strategies are applied to
BASELINES = {"bert": {"ConSERT": "consert-bert", "SimCSE": "simcse-bert", "PromptBERT": "promptbert-bert"},
             "roberta": {"SimCSE": "simcse-roberta", "PromptRoBERTa": "promptroberta-roberta"}}
#: backbone -> the supervised baselines of Tables 2 and 7
SUPERVISED = {"bert": {"SimCSE": "simcse-sup-bert", "PromptBERT": "promptbert-sup-bert"},
              "roberta": {"SimCSE": "simcse-sup-roberta", "PromptRoBERTa": "promptroberta-sup-roberta"}}
STRATEGIES = ("joint", "sup-unsup", "sup-joint")
#: the α each joint strategy is tuned over (the paper tries "different values of α for each method" without listing
#: them; a log grid around the values the papers use: DiffAug's 1e-3, ConSERT's joint ratio 1 / 0.15 ≈ 6.7)
ALPHA_GRIDS = per_profile({"paper": [0.001, 0.01, 0.1, 1.0, 10.0], "cpu": [0.01, 0.1, 1.0],
                            "mini": [0.001, 0.01, 0.1, 1.0, 10.0], "smoke": [1.0]})
#: the dev score the α is chosen on
DEV_COLUMN = "STS-B dev."


def alpha_grid(profile: str, alphas: list | None = None) -> list[float]:
    chosen = list(alphas) if alphas else ALPHA_GRIDS[profile]
    bad = [a for a in chosen if not isinstance(a, (int, float)) or a <= 0]
    check(chosen and not bad, f"α values are positive numbers, got {bad or chosen}")
    return chosen


def strategy_rows(method: str, name: str, strategy: str, alphas: list[float],
                  overrides: dict | None = None) -> tuple[list[Row], dict]:
    """`<method>_<strategy>` on preset `name`: one row (sup-unsup has no α), or one candidate row per α, grouped
    under the row's label for the selection on STS-B dev."""
    label, base = f"{method}_{strategy}", {"semi_strategy": strategy, **(overrides or {})}
    if strategy == "sup-unsup":
        return [Row(label, name, base)], {}
    candidates = [Row(f"{label} (α = {a:g})", name, {**base, "aux_weight": a}) for a in alphas]
    return candidates, {label: [r.label for r in candidates]}


def check_strategies(strategies: list) -> None:
    check(set(strategies) <= set(STRATEGIES), f"strategies are {list(STRATEGIES)}, got {strategies}")


def check_baselines(baselines: list) -> None:
    check(baselines and set(baselines) <= set(BASELINES["bert"]), f"baselines are {list(BASELINES['bert'])}, "
          f"got {baselines}")


def table6_rows(alphas: list[float], strategies=STRATEGIES, baselines=tuple(BASELINES["bert"])) -> tuple[list[Row],
                                                                                                        dict]:
    """Table 6: ConSERT, SimCSE and PromptBERT (BERT-base; or `baselines` of them) under each strategy, in the paper's
    order."""
    rows, groups = [], {}
    for method, name in BASELINES["bert"].items():
        if method not in baselines:
            continue
        for strategy in strategies:
            more_rows, more_groups = strategy_rows(method, name, strategy, alphas)
            rows, groups = rows + more_rows, {**groups, **more_groups}
    return rows, groups


def sts_and_dev_columns(record: dict) -> dict:
    """STS test (7 tasks and average) and STS-B dev of the run's best checkpoint (what α is chosen on)."""
    return {**sts_test_columns(record), **stsb_dev_column(record)}


def chosen_alphas(chosen: dict) -> "pd.DataFrame":  # noqa: F821
    """The α each joint row was selected with (the paper does not print its choice)."""
    import pandas as pd

    alphas = alpha_of(chosen)
    return pd.DataFrame([{"row": group, "α chosen on STS-B dev": f"{alphas[group]:g}" if group in alphas
                          else "none finished"} for group in chosen]).set_index("row")


def label_subsets(profile: str, subsets: int | None) -> int:
    """Random subsets per low-data fraction: the paper's five on `paper`, one elsewhere, unless given."""
    chosen = subsets if subsets is not None else (PAPER_SUBSETS if profile == "paper" else 1)
    check(isinstance(chosen, int) and chosen >= 1, f"subsets is a positive integer, got {subsets}")
    return chosen


def fraction_label(fraction: float) -> str:
    """0.01 -> '1%', the paper's column."""
    return f"{100 * fraction:g}%"


def fraction_rows(backbone: str, fraction: float, subsets: int, profile: str, recipe: str = "paper",
                  joint_alpha: dict | None = None) -> list[Row]:
    """Tables 2 and 7, one column: the `_joint` baselines (at the α each was chosen with, `joint_alpha`: label ->
    α, the 100% selection; a baseline without one is left out), DiffAug semi-supervised (w/ aux, as the paper's
    rows), the supervised baselines and supervised DiffAug, trained on `fraction` of the NLI triplets, each on
    `subsets` random subsets (nli_subset = the subset's seed; 100% has one). Every subset's runs share the row's
    label, so its mean is over subsets x seeds. Off `paper`, the fraction is of the profile's NLI triplets, and the
    batches shrink where the 1% would not hold one (SMALL_FRACTION_BATCH, said in the notebook)."""
    small = SMALL_FRACTION_BATCH.get(profile)
    runs = {f"{method}_joint": (name, {"semi_strategy": "joint", "aux_weight": joint_alpha[f"{method}_joint"]})
            for method, name in BASELINES[backbone].items()
            if method != "ConSERT" and f"{method}_joint" in (joint_alpha or {})}
    runs.update({"DiffAug (ours)": (preset("semi-aux", backbone, recipe), {}),
                 **{method: (name, {}) for method, name in SUPERVISED[backbone].items()},
                 "DiffAug (ours) (supervised)": (preset("sup", backbone, recipe), {})})
    if fraction == 1:
        return [Row(label, name, overrides) for label, (name, overrides) in runs.items()]
    rows = []
    for label, (name, base) in runs.items():
        overrides, settings = {**base, "nli_fraction": fraction}, PRESETS[name][1]
        if small and settings.get("data") == "NLI":
            overrides["batch_size"] = small
        if small and (settings["method"] == "diffaug" or "semi_strategy" in base):
            overrides["nli_batch_size"] = small
        rows += [Row(label, name, {**overrides, "nli_subset": subset}) for subset in range(subsets)]
    return rows


def unsupervised_rows(backbone: str) -> list[Row]:
    """Tables 2 and 7's 0% column: the `_joint` baselines without labels are the unsupervised methods."""
    return [Row(f"{method}_joint", name) for method, name in BASELINES[backbone].items() if method != "ConSERT"]


def joint_selection_rows(backbone: str, profile: str, alphas: list | None = None) -> tuple[list[Row], dict]:
    """The 100% `_joint` runs of every α, for choosing each baseline's α on STS-B dev (Table 6's runs, for BERT)."""
    rows, groups = [], {}
    for method, name in BASELINES[backbone].items():
        if method != "ConSERT":
            more_rows, more_groups = strategy_rows(method, name, "joint", alpha_grid(profile, alphas))
            rows, groups = rows + more_rows, {**groups, **more_groups}
    return rows, groups


def alpha_of(chosen: dict) -> dict:
    """{group: α} from best_on_dev's {group: chosen candidate label} (groups with no finished candidate left out)."""
    return {group: float(label.rpartition("= ")[2].rstrip(")")) for group, label in chosen.items() if label}


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
    """Snapshot interval giving about `points` points over the longest stage 1 (our reading of Figure 3: about
    100-step spacing over 4000 steps; the text lists no steps)."""
    return max(1, max(steps) // points)


def stage1_loss(record: dict) -> float:
    """The stage-1 cross-entropy at the end of stage 1: the mean of the logged stage-1 losses over its last tenth."""
    losses = [r["loss"] for r in record["train_curve"] if r.get("stage") == 1 and "loss" in r]
    tail = losses[-max(1, len(losses) // 10):]
    return sum(tail) / len(tail)


# --- Table 3: the augmentation modules ------------------------------------------------------------------------
#: Table 3's trained rows: the semi-supervised w/o-aux recipe with each module (cse_kit.methods.diffaug: prefix_mode,
#: augmentation_module, module_rank); "Dropout" is unsupervised SimCSE, run by the kit ("Synonym replacement" is cited)
MODULE_ROWS = {"Prefix (same)": {"prefix_mode": "same"}, "Prefix (fix)": {"prefix_mode": "fix"},
               "Prefix (different, ours)": {}, "Prefix-tuning (different)": {"prefix_mode": "tuning"},
               **{f"{name} (different, r = {r})": {"augmentation_module": module, "module_rank": r}
                  for name, module in (("Adapter", "adapter"), ("LoRA", "lora")) for r in (4, 64)}}
SHARE_COLUMN = "# added params (rel. BERT-base)"


def table3_rows(recipe: str = "paper") -> list[Row]:
    """Dropout (unsupervised SimCSE) and every module row; "Prefix (different, ours)" is Table 8's no-aux run."""
    return [Row("Dropout", "simcse-bert"),
            *[Row(label, preset("semi", recipe=recipe), overrides) for label, overrides in MODULE_ROWS.items()]]


def added_parameter_shares() -> dict[str, dict]:
    """Each row's added parameters in % of BERT-base's (the module's over the encoder's, on BERT-base's shape built
    without weights), for side_by_side beside the paper's 0.3% / 4.8%."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ..methods.diffaug import DiffAug
    from ..models import resolve_reference

    # BERT-base's vocabulary (the template's ids; the share does not depend on them), offline
    tokenizer = AutoTokenizer.from_pretrained(resolve_reference("all-MiniLM-L6-v2"))
    out = {"Dropout": {SHARE_COLUMN: 0.0}}
    for label, overrides in MODULE_ROWS.items():
        with torch.device("meta"):
            encoder = BertModel(BertConfig(), add_pooling_layer=False)
            share = DiffAug(encoder, tokenizer, **overrides).added_parameter_share()
        out[label] = {SHARE_COLUMN: 100 * share}
    return out


# --- Table 4: training cost --------------------------------------------------------------------------------------
#: the paper's three runs (BERT-base, NLI, batch 128, 3 epochs, one RTX 8000): the supervised presets
COST_RUNS = {"SimCSE": "simcse-sup-bert", "PromptBERT": "promptbert-sup-bert", "DiffAug (ours)": "diffaug-sup-bert"}
COST_EPOCHS, COST_BATCH = 3, 128
#: SimCSE's NLI triplets (the paper's 1% is 2,756): what every profile's projection is to, the paper's full run
NLI_TRIPLETS = 275_601
#: main-stage steps timed per run (a window, projected to 3 epochs); smoke keeps its profile's tiny batch
COST_WINDOWS = per_profile({"paper": 100, "cpu": 6, "mini": 20, "smoke": 3})
RATIO_COLUMNS = {"Training time": "time ratio to SimCSE", "GPU memory usage": "memory ratio to SimCSE"}


def cost_rows(profile: str, window: int | None = None) -> list[Row]:
    """Each run trained for a window of main-stage steps (DiffAug's stage 1 capped to the window too), evaluated
    once at its end, with the paper's batch (not on smoke); gradient accumulation off, as the paper's one GPU."""
    steps = window or COST_WINDOWS[profile]
    check(isinstance(steps, int) and steps >= 1, f"window is a positive number of steps, got {window}")
    batch = {} if sizing(profile) == "smoke" else {"batch_size": COST_BATCH}
    rows = []
    for label, name in COST_RUNS.items():
        overrides = {**batch, "max_steps": steps, "eval_steps": steps, "gradient_accumulation": 1}
        if PRESETS[name][1]["method"] == "diffaug":
            overrides["stage1_steps"] = min(steps, _full_run(name, profile).stage1_steps)
        rows.append(Row(label, name, overrides))
    return rows


def _full_run(name: str, profile: str):
    from ..train.presets import build_config

    return build_config(name, profile, {} if sizing(profile) == "smoke" else {"batch_size": COST_BATCH})


def projected_steps(name: str, profile: str) -> int:
    """The steps of the paper's full run: 3 epochs of NLI at the batch, plus DiffAug's whole stage 1."""
    cfg = _full_run(name, profile)
    return COST_EPOCHS * (NLI_TRIPLETS // cfg.batch_size) + cfg.stage1_steps


def cost_columns(profile: str):
    """record -> projected minutes of the paper's full run on this machine (training seconds per step of the
    window, stage-1 and main steps alike; evaluation left out) and peak memory in GB (the GPU's on CUDA, the
    process's resident memory elsewhere)."""
    def columns(record: dict) -> dict:
        per_step, memory, gpu = training_cost(record)
        return {"Training time": per_step * projected_steps(record["config"]["preset"], profile) / 60,
                "GPU memory usage": memory / 1e9,
                "memory measured": "peak GPU memory" if gpu else "peak resident memory of the process (no GPU)"}
    return columns


def cost_comparison(long: "pd.DataFrame") -> "pd.DataFrame":  # noqa: F821
    """Table 4's cells (projected minutes, GB) beside the paper's, and each run's ratios to SimCSE beside the
    paper's ratios (1 : 1.33 : 1.81 in time, 1 : 1.3 : 1.5 in memory): on another machine the ratios compare."""
    import pandas as pd

    from ..experiments import compare, unpublished

    table = compare(long, 4, list(RATIO_COLUMNS), paper="diffaug")
    baseline = long[(long.row == "SimCSE") & (long.status == "ok")]
    ratios = long.copy()
    for column, ratio in RATIO_COLUMNS.items():
        ratios[ratio] = long[column] / (baseline[column].mean() if len(baseline) else math.nan)
    lines = unpublished(ratios, list(RATIO_COLUMNS.values()))
    published = paper_table(4, "diffaug")
    for column, ratio in RATIO_COLUMNS.items():
        at = lines.column == ratio
        lines.loc[at, "paper"] = [published.loc[row, column] / published.loc["SimCSE", column] for row in lines.row[at]]
        lines.loc[at, "diff"] = lines.loc[at, "mean"] - lines.loc[at, "paper"]
    return pd.concat([table, lines], ignore_index=True)


# --- Figure 4: prefix length ---------------------------------------------------------------------------------------
#: the prefix lengths swept (the paper plots some without listing them; optimum "around 8")
PREFIX_GRIDS = per_profile({"paper": [1, 2, 4, 8, 16, 32], "cpu": [2, 4, 8, 16], "mini": [1, 2, 4, 8, 16, 32],
                             "smoke": [2, 8]})


def prefix_grid(profile: str, lengths: list | None) -> list[int]:
    chosen = list(lengths) if lengths else PREFIX_GRIDS[profile]
    bad = [n for n in chosen if not isinstance(n, int) or n < 1]
    check(chosen and not bad, f"prefix lengths are positive integers, got {bad or chosen}")
    return chosen


def figure4_rows(lengths: list[int], recipe: str = "paper") -> list[Row]:
    """The semi-supervised w/o-aux recipe (Table 3's setting) with each prefix length l (l = 8: its preset run)."""
    return [Row(str(n), preset("semi", recipe=recipe), {"prefix_len": n}) for n in lengths]


def literature(table: int, trained: list[str]) -> "pd.DataFrame":  # noqa: F821
    """The paper's rows the kit does not train (other pipelines' numbers, marked ♢ ♡ ♣), shown as published, with
    where they come from; `trained` are the labels the notebook trains."""
    frame = paper_table(table, "diffaug")
    marks = paper_tables("diffaug")[str(table)].get("marks") or {}
    cited = [label for label in frame.index if label not in set(trained)]
    sources = [marks.get(label) or "the original paper" for label in cited]
    return frame.loc[cited].assign(source=sources)


def dynamics_sentences(data_dir, count: int) -> list[str]:
    """Figure 3's inputs (§3.2 leaves them open; our choice): the first `count` distinct STS-B dev sentences."""
    from ..data import load_sts

    check(isinstance(count, int) and count >= 1, f"sentences is a positive number of STS-B dev sentences, got {count}")
    pairs = load_sts("STSBenchmark", "dev", data_dir)
    return list(dict.fromkeys(s for p in pairs for s in (p.sent1, p.sent2)))[:count]


def stage1_curves(record: dict, store, sentences: list[str]) -> dict:
    """δ, κ and the stage-1 loss at each of a run's stage-1 snapshots, and the dropout reference δ, measured on its
    base encoder (stage 1 leaves it frozen); cached in the run's folder (cse_kit.eval.prefix_dynamics)."""
    from ..eval.prefix_dynamics import stage1_dynamics
    from ..models import load_encoder

    from ..train.config import TrainConfig

    cfg = TrainConfig.from_saved(record["config"])
    tokenizer, encoder = load_encoder(cfg.model)
    return stage1_dynamics(store.run_dir(record["key"]), encoder, tokenizer, cfg.template,
                           cfg.method_options["prefix_len"], sentences, seed=record["seed"],
                           max_seq_length=cfg.max_seq_length)


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
