"""Every method under one protocol: a head-to-head the four papers never had. Each method is trained with the kit's
one engine on the same backbone, corpus, sequence length, evaluation and seeds, in two settings: each paper's
recipe (its preset as published) and one shared recipe (the same batch, learning rate, steps and model selection for
all, so the objective is the only difference). The statistics say which differences exceed seed variance: a paired
test over seeds (matched seeds) and a paired bootstrap over the STS test pairs within each seed."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..data.published import paper_value
from ..experiments import START_COLUMN, Row, check, training_cost
from ..train.presets import per_profile, sizing

NOTEBOOK = "compare_methods"
TITLE = "All methods under one protocol"
#: method -> (its unsupervised BERT-base preset, where its paper prints its average STS: paper, table, row and the
#: row's setting where the label names other runs in other tables of that paper)
METHODS = {
    "SimCSE": ("simcse-bert", ("diffcse", 1, "SimCSE-BERT-base", "published (Gao et al., 2021)")),
    "ConSERT": ("consert-bert", ("diffaug", 1, "ConSERT", None)),
    "PromptBERT": ("promptbert-bert", ("diffaug", 1, "PromptBERT", "unsupervised")),
    "DiffCSE": ("diffcse-bert-sts", ("diffcse", 1, "DiffCSE-BERT-base", "STS model")),
    "SCD": ("scd-bert", ("scd", 1, "SCD-BERT-base", None)),
    "ESimCSE": ("esimcse-bert", ("esimcse", 3, "ESimCSE-BERT-base", None)),
    "DiffAug": ("diffaug-semi-bert", ("diffaug", 1, "DiffAug (ours)", "semi-supervised, w/o aux loss")),
}
#: DiffAug also reads NLI labels (its stage 1): said beside its rows
USES_LABELS = {"DiffAug"}
RECIPES = ("paper recipe", "shared recipe")
#: the shared recipe per profile: SimCSE's unsupervised recipe (batch 64, lr 3e-5, 1 epoch of Wiki1M, length 32,
#: STS-B dev every 125 steps) for every objective; cpu and smoke keep their profile's sizes
SHARED_RECIPE = per_profile({
    "paper": {"batch_size": 64, "lr": 3e-5, "epochs": 1, "max_seq_length": 32, "eval_steps": 125,
              "metric": "stsb_spearman"},
    "cpu": {"batch_size": 32, "lr": 3e-5, "epochs": 1, "max_seq_length": 32, "eval_steps": 8,
            "metric": "stsb_spearman"},
    "mini": {"batch_size": 64, "lr": 3e-5, "epochs": 1, "max_seq_length": 32, "eval_steps": 25,
             "metric": "stsb_spearman"},
    "smoke": {"batch_size": 16, "lr": 1e-4, "epochs": 1, "max_seq_length": 32, "eval_steps": 8,
              "metric": "stsb_spearman"},
})
#: the transfer evaluation per profile: SentEval's `test` config (the papers') where the numbers compare with the
#: papers'. Off by default on cpu: one run's transfer test there takes 7 min on the idle 2 cores (268 s encoding 108k
#: sentences, 164 s of 10-fold classifiers: docs/evaluation.md) and several times that under load, so the 42 runs would
#: add 5 h or more; `transfer="fasttest"` (SentEval's fast classifiers, about 5 min a run) or "test" asks for it. Off on
#: smoke, where it would dwarf the trainings.
TRANSFER = per_profile({"paper": "test", "cpu": "none", "mini": "none", "smoke": "none"})
TRANSFER_MODES = ("test", "fasttest", "none")
#: seeds per profile: at least five where the numbers compare with the papers', three on cpu
SEEDS = per_profile({"paper": [42, 43, 44, 45, 46], "cpu": [42, 43, 44], "mini": [42, 43, 44], "smoke": [1, 2]})
#: the orderings the papers claim (winner, loser, where)
CLAIMS = [("DiffCSE", "SimCSE", "DiffCSE Table 1"), ("SCD", "SimCSE", "SCD Table 1"),
          ("ESimCSE", "SimCSE", "ESimCSE Table 3"), ("PromptBERT", "SimCSE", "DiffAug Table 1"),
          ("SimCSE", "ConSERT", "DiffAug Table 1"), ("DiffAug", "PromptBERT", "DiffAug Table 1"),
          ("DiffAug", "DiffCSE", "DiffAug Table 1"), ("PromptBERT", "DiffCSE", "DiffAug Table 1")]
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")


def label(method: str, recipe: str) -> str:
    return f"{method} ({recipe})"


#: the method of one's own that notebooks/your_method.ipynb trains unless given another (docs/extending.md)
EXAMPLE_PLUGIN = str(Path(__file__).resolve().parents[2] / "examples" / "margin_simcse.py")
#: the preset a method of one's own trains on: SimCSE's unsupervised recipe (its data, model, schedule and dev
#: selection on each profile), so it differs from SimCSE's row by its objective only
OWN_BASE_PRESET = "simcse-bert"


def own_methods() -> list[str]:
    """The methods of one's own registered in this process ($CSE_KIT_PLUGINS, entry points, notebook cells)."""
    from ..methods.registry import METHODS as REGISTERED
    from ..methods.registry import is_kit_method, load_plugins

    load_plugins()
    return [name for name, cls in REGISTERED.items() if not is_kit_method(cls)]


def check_methods(methods: list, recipes: list) -> None:
    known = [*METHODS, *own_methods()]
    check(set(methods) <= set(known) and methods, f"methods are {known} (yours: register it and name its module in "
                                                  f"$CSE_KIT_PLUGINS, docs/extending.md), got {methods}")
    check(set(recipes) <= set(RECIPES) and recipes, f"recipes are {list(RECIPES)}, got {recipes}")


def method_row(method: str, own: dict | None = None) -> tuple[str, dict]:
    """(preset, settings) of a method's paper recipe: a kit method's preset, a method of one's own as `own` gives
    it ({name: (preset, settings)}), else on OWN_BASE_PRESET."""
    if method in METHODS:
        return METHODS[method][0], {}
    return (own or {}).get(method, (OWN_BASE_PRESET, {"method": method}))


def rows(profile: str, methods=tuple(METHODS), recipes=RECIPES, own: dict | None = None) -> list[Row]:
    """One row per method and recipe: the paper recipe is the preset itself (the papers' notebooks' runs, shared
    through the results store), the shared recipe the preset with SHARED_RECIPE. A method of one's own takes
    SimCSE's preset, or the preset and settings `own` gives it (method_row)."""
    out = []
    for recipe in recipes:
        for method in methods:
            preset, settings = method_row(method, own)
            shared = {} if recipe == "paper recipe" else SHARED_RECIPE[profile]
            out.append(Row(label(method, recipe), preset, {**settings, **shared}))
    return out


def published(method: str) -> float:
    """The paper's average STS for a kit method; NaN for a method of one's own."""
    if method not in METHODS:
        return math.nan
    paper, table, row, setting = METHODS[method][1]
    return paper_value(table, row, "Avg.", paper, setting=setting)


# --- per-record columns ---------------------------------------------------------------------------------------------
def task_spearman(sims: dict[str, list], gold: dict[str, np.ndarray]) -> dict[str, float]:
    """Each STS task's Spearman (×100) of its test-pair similarities against the gold scores."""
    from ..eval.sts import correlations

    return {task: correlations(np.asarray(sims[task]), gold[task])["spearman"] for task in STS_TASKS}


def sts_columns(record: dict, gold: dict[str, np.ndarray]) -> dict:
    """Each STS task's Spearman and their average, from the record's test-pair similarities (`sts_pairs`)."""
    out = task_spearman(record["metrics"]["sts_pairs"], gold)
    return {**out, "Avg. STS": float(np.mean(list(out.values())))}


#: how the long table names an MTEB task's column
MTEB_PREFIX = "MTEB "


def mteb_columns(record: dict) -> dict:
    """Each MTEB task's main score (×100; mteb's own evaluation) that the record has (`cse-kit eval --benchmark mteb`
    on the run's model, or the notebook's `mteb_tasks`); none when it has none."""
    return {MTEB_PREFIX + task: 100 * r["main_score"] for task, r in record["metrics"].get("mteb", {}).items()}


def cost_columns(record: dict, batch_size: int, full_steps: int) -> dict:
    """Training seconds per step, sentences/s, peak memory (GPU on CUDA, else the process's resident memory) and
    the projected wall time of the run's full recipe on this machine."""
    per_step, memory, _ = training_cost(record)
    return {"s/step": per_step, "sentences/s": batch_size / per_step, "peak memory (GB)": memory / 1e9,
            "projected hours": per_step * full_steps / 3600}


# --- significance ---------------------------------------------------------------------------------------------------
def paired_seed_test(a: dict[int, float], b: dict[int, float]) -> tuple[float, float]:
    """(mean of a - b, two-sided p) of the paired t-test over the seeds both have. Identical values: p = 1; fewer than
    two shared seeds: p = NaN."""
    from scipy.stats import ttest_rel

    seeds = sorted(set(a) & set(b))
    diff = np.array([a[s] - b[s] for s in seeds])
    if len(diff) < 2:
        return (float(diff.mean()) if len(diff) else math.nan), math.nan
    if np.allclose(diff, diff[0]) and diff[0] == 0:
        return 0.0, 1.0
    return float(diff.mean()), float(ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue)


def resamples(gold: dict[str, np.ndarray], samples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """task -> (samples, n) indices of the task's test pairs drawn with replacement: one draw per replicate, shared by
    every method and seed (the bootstrap is paired)."""
    rng = np.random.default_rng(seed)
    return {task: rng.integers(0, len(gold[task]), (samples, len(gold[task]))) for task in STS_TASKS}


def resampled_ranks(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """rankdata(values[index], axis=1), average ranks for ties, without sorting each replicate: the values' distinct
    levels are sorted once, and a replicate's ranks follow from how often it drew each level (a bincount)."""
    levels, level = np.unique(values, return_inverse=True)
    drawn = level[index]  # (replicates, n): each draw's level
    offsets = np.arange(len(index))[:, None] * len(levels)
    counts = np.bincount((drawn + offsets).ravel(), minlength=len(index) * len(levels)).reshape(len(index), -1)
    average = np.cumsum(counts, axis=1) - counts + (counts + 1) / 2  # draws below the level, then the ties' middle
    return np.take_along_axis(average, drawn, axis=1)


def _pearson_rows(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Row-wise Pearson (×100) of two (replicates, n) arrays of ranks: their Spearman, as scipy's spearmanr."""
    rx = rx - rx.mean(1, keepdims=True)
    ry = ry - ry.mean(1, keepdims=True)
    return 100 * (rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))


def gold_ranks(gold: dict[str, np.ndarray], index: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each task's gold scores ranked within every replicate: the same for every model, so ranked once."""
    return {task: resampled_ranks(gold[task], index[task]) for task in STS_TASKS}


def replicate_averages(sims: dict[str, list], ranked_gold: dict[str, np.ndarray],
                       index: dict[str, np.ndarray]) -> np.ndarray:
    """(replicates,): the average STS of one model on every bootstrap replicate of the test pairs."""
    return np.mean([_pearson_rows(resampled_ranks(np.asarray(sims[t]), index[t]), ranked_gold[t])
                    for t in STS_TASKS], axis=0)


def average_sts(sims: dict[str, list], gold: dict[str, np.ndarray]) -> float:
    return float(np.mean(list(task_spearman(sims, gold).values())))


def _bootstrap_result(observed: float, replicates: np.ndarray) -> tuple[float, float, float, float]:
    """(observed difference, 95% interval, two-sided p: twice the smaller share of replicates on one side of 0)."""
    low, high = np.percentile(replicates, [2.5, 97.5])
    tail = min((replicates <= 0).mean(), (replicates >= 0).mean())
    return observed, float(low), float(high), float(min(1.0, 2 * tail))


def _model_replicates(by_seed: dict[int, dict], gold: dict[str, np.ndarray], index: dict[str, np.ndarray],
                      ranked_gold: dict[str, np.ndarray]):
    """One model's ({seed: replicate averages}, {seed: observed average STS})."""
    return ({s: replicate_averages(sims, ranked_gold, index) for s, sims in by_seed.items()},
            {s: average_sts(sims, gold) for s, sims in by_seed.items()})


def _paired_difference(a, b) -> tuple[float, float, float, float]:
    """bootstrap result of a - b from two models' _model_replicates, paired over their shared seeds."""
    (reps_a, observed_a), (reps_b, observed_b) = a, b
    seeds = sorted(set(reps_a) & set(reps_b))
    replicates = np.mean([reps_a[s] - reps_b[s] for s in seeds], axis=0)
    return _bootstrap_result(float(np.mean([observed_a[s] - observed_b[s] for s in seeds])), replicates)


def paired_bootstrap(a: dict[int, dict], b: dict[int, dict], gold: dict[str, np.ndarray], samples: int = 1000,
                     seed: int = 0) -> tuple[float, float, float, float]:
    """Paired bootstrap of the average STS difference a - b over the STS test pairs (a[seed][task] = the test-pair
    similarities): each replicate resamples every task's pairs once for both methods and all their seeds, and its
    difference is the mean over the shared seeds. Returns (observed difference, 95% interval low, high, p)."""
    index = resamples(gold, samples, seed)
    ranked = gold_ranks(gold, index)
    return _paired_difference(_model_replicates(a, gold, index, ranked), _model_replicates(b, gold, index, ranked))


def seed_tests(values: dict[str, dict[int, float]]) -> dict[tuple[str, str], tuple[float, float]]:
    """(x, y) -> paired_seed_test of x against y, for every ordered pair; values: method -> seed -> average STS."""
    return {(x, y): paired_seed_test(values[x], values[y]) for x, y in itertools.permutations(values, 2)}


def bootstrap_tests(similarities: dict[str, dict[int, dict]], gold: dict[str, np.ndarray], samples: int = 1000,
                    seed: int = 0) -> dict[tuple[str, str], tuple[float, float]]:
    """(x, y) -> (difference, p) of paired_bootstrap for every ordered pair; each model's replicates are computed
    once, on draws shared by all."""
    index = resamples(gold, samples, seed)
    ranked = gold_ranks(gold, index)
    models = {m: _model_replicates(by_seed, gold, index, ranked) for m, by_seed in similarities.items()}
    out = {}
    for x, y in itertools.permutations(similarities, 2):
        diff, _, _, p = _paired_difference(models[x], models[y])
        out[(x, y)] = (diff, p)
    return out


def significance_matrix(tests: dict[tuple[str, str], tuple[float, float]], level: float = 0.05) -> pd.DataFrame:
    """Method x method: the row's mean difference to the column, starred where its test's p < level."""
    names = list(dict.fromkeys(x for x, _ in tests))
    out = pd.DataFrame("", index=pd.Index(names, name="row − column"), columns=names)
    for (x, y), (diff, p) in tests.items():
        out.loc[x, y] = "n/a" if math.isnan(diff) else f"{diff:+.2f}{'*' if p < level else ''}"
    return out


def claims_in_words(tests: dict[tuple[str, str], tuple[float, float]], level: float = 0.05) -> list[str]:
    """For each ordering a paper claims between two methods present: holds (beyond seed variance by the paired
    t-test), same or opposite direction but within seed variance, or reversed (opposite, beyond seed variance)."""
    lines = []
    for winner, loser, source in CLAIMS:
        if (winner, loser) not in tests:
            continue
        diff, p = tests[(winner, loser)]
        if math.isnan(diff):
            verdict = "not measurable (no seeds in common)"
        elif diff > 0 and p < level:
            verdict = f"holds: +{diff:.2f}, beyond seed variance (paired t-test p = {p:.3f})"
        elif diff > 0:
            verdict = f"same direction, +{diff:.2f}, within seed variance (p = {p:.2f})"
        elif p < level:
            verdict = f"reversed: {diff:+.2f}, beyond seed variance (paired t-test p = {p:.3f})"
        else:  # an opposite sign within seed variance (or no variance to test against) is not a reversal
            verdict = f"opposite direction, {diff:+.2f}, within seed variance" + (
                f" (p = {p:.2f})" if not math.isnan(p) else " (no spread to test)")
        lines.append(f"{winner} > {loser} ({source}): {verdict}")
    return lines


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """Methods no other beats on both axes: (cost, score) with lower cost and higher score better."""
    return [m for m, (cost, score) in points.items()
            if not any(c <= cost and s >= score and (c, s) != (cost, score) for c, s in points.values())]


# --- the notebook's tables --------------------------------------------------------------------------------------------
#: the corpus every recipe's full run is projected over (Wiki1M)
CORPUS_SENTENCES = 1_000_000


def gold(data_dir=None) -> dict[str, np.ndarray]:
    """Each STS task's test gold scores, in the order of the records' `sts_pairs`."""
    from ..eval.sts import test_pairs

    return {task: np.array([p.score for p in test_pairs(task, data_dir)]) for task in STS_TASKS}


def transfer_evaluation(profile: str, transfer: str = "auto") -> str | None:
    """The results store's transfer evaluation (`transfer_test`, `transfer_fasttest`) or None: `transfer` is a mode
    of TRANSFER_MODES, or "auto" for the profile's."""
    mode = TRANSFER[profile] if transfer == "auto" else transfer
    check(mode in TRANSFER_MODES, f"transfer is auto or one of {list(TRANSFER_MODES)}, got {transfer!r}")
    return None if mode == "none" else f"transfer_{mode}"


def evaluations(transfer: str | None) -> tuple[str, ...]:
    """What every run is evaluated with: every STS test pair's cosine, and the transfer evaluation if any."""
    return ("sts_pairs",) + ((transfer,) if transfer else ())


def columns(gold_scores: dict[str, np.ndarray], transfer: str | None):
    """record -> the head-to-head's columns: STS tasks and average (from the test pairs), the transfer average (NaN
    without a transfer evaluation), and the cost of the run (cost_columns, its full recipe projected over Wiki1M's
    1M sentences at its batch size)."""

    scores = start_columns(gold_scores, transfer)

    def of(record: dict) -> dict:
        cfg = record["config"]
        full_steps = cfg["epochs"] * (CORPUS_SENTENCES // cfg["batch_size"]) + cfg.get("stage1_steps", 0)
        return {**scores(record), **cost_columns(record, cfg["batch_size"], full_steps), **mteb_columns(record)}
    return of


def start_columns(gold_scores: dict[str, np.ndarray], transfer: str | None):
    """record -> the columns an untrained start has too: STS tasks and average, the transfer average (NaN without a
    transfer evaluation)."""
    return lambda record: {**sts_columns(record, gold_scores),
                           "Avg. transfer": record["metrics"][transfer]["avg"] if transfer else math.nan}


def evaluate_mteb(found: dict[str, list[dict]], store, spec: str) -> None:
    """Every run of found (experiments.records) evaluated on the MTEB tasks of spec (names, benchmark names or
    `default`: cse_kit.eval.mteb_eval.resolve_tasks) into its record; tasks a record has are reused."""
    from ..eval.mteb_eval import resolve_tasks

    tasks = resolve_tasks(spec)
    for record in {r["key"]: r for records in found.values() for r in records}.values():
        store.get_mteb(record["key"], tasks)


def mteb_tasks(long: pd.DataFrame) -> list[str]:
    return [c for c in long if c.startswith(MTEB_PREFIX)]


def with_mteb_average(long: pd.DataFrame) -> pd.DataFrame:
    """long with `Avg. MTEB` for the runs that have MTEB results: the mean over the tasks every such run has (like
    compared with like); long as it is when none has any."""
    tasks = mteb_tasks(long)
    if not tasks:
        return long
    has = long[tasks].notna().any(axis=1)
    common = [c for c in tasks if long.loc[has, c].notna().all()]
    return long.assign(**{"Avg. MTEB": long[common].mean(axis=1).where(has) if common else math.nan})


def mteb_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per method and recipe with MTEB results: the mean over its seeds of each task's main score (×100) and of
    Avg. MTEB, and the seeds; an empty frame when no run has MTEB results."""
    tasks = mteb_tasks(long)
    if not tasks:
        return pd.DataFrame()
    ok = long[(long.status == "ok") & long[tasks].notna().any(axis=1)].copy()
    ok["method"], ok["recipe"] = zip(*ok.row.map(method_and_recipe))
    groups = ok.groupby(["recipe", "method"], sort=False)
    return groups[[*tasks, "Avg. MTEB"]].mean().assign(seeds=groups.size()).reset_index()


def method_and_recipe(row_label: str) -> tuple[str, str]:
    method, _, recipe = row_label.partition(" (")
    return method, recipe.rstrip(")")


def summary(long: pd.DataFrame, measures=("Avg. STS", "Avg. transfer", "Avg. MTEB")) -> pd.DataFrame:
    """Per method and recipe: mean ± std, the 95% interval (t over the seeds) and n of each measure, and the paper's
    own average STS beside the paper recipe. A measure no run has (transfer not asked for, no MTEB results) is left
    out."""
    from scipy.stats import t as student

    measures = [m for m in measures if m in long and long[m].notna().any()]
    lines = []
    for row, group in long[long.status == "ok"].groupby("row", sort=False):
        method, recipe = method_and_recipe(row)
        line = {"method": method + (" (uses NLI labels)" if method in USES_LABELS else ""), "recipe": recipe,
                "paper Avg. STS": published(method) if recipe == "paper recipe" else math.nan}
        for measure in measures:
            values = group[measure].dropna().to_numpy(float)
            n = len(values)
            std = values.std(ddof=1) if n > 1 else math.nan
            half = student.ppf(0.975, n - 1) * std / math.sqrt(n) if n > 1 else math.nan
            line.update({f"{measure} mean": values.mean() if n else math.nan, f"{measure} std": std,
                         f"{measure} 95% interval": f"[{values.mean() - half:.2f}, {values.mean() + half:.2f}]"
                         if n > 1 else "n/a"})
        line["seeds"] = int(group[measures[0]].notna().sum())
        lines.append({**line, **start_summary(group)})
    return pd.DataFrame(lines)


def start_summary(group: pd.DataFrame, measure: str = "Avg. STS") -> dict:
    """A method's untrained start (the backbone under the pooler its runs are evaluated with), its `measure`, and the
    method's mean change from it; {} on a profile that shows no starts."""
    start = START_COLUMN + measure
    if start not in group or group[start].isna().all():
        return {}
    value = float(group[start].dropna().iloc[0])
    return {"start": group["start"].dropna().iloc[0], f"start {measure}": value,
            f"{measure} − start": float(group[measure].dropna().mean()) - value}


def by_seed(long: pd.DataFrame, recipe: str, column: str = "Avg. STS") -> dict[str, dict[int, float]]:
    """method -> seed -> `column` for one recipe's finished runs."""
    out: dict[str, dict[int, float]] = {}
    for _, line in long[long.status == "ok"].iterrows():
        method, line_recipe = method_and_recipe(line["row"])
        if line_recipe == recipe:
            out.setdefault(method, {})[int(line["seed"])] = float(line[column])
    return out


def cost_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per method and recipe: median s/step, sentences/s, peak memory and projected hours over the seeds, and the
    ratios of time and memory to SimCSE under the same recipe."""
    ok = long[long.status == "ok"].copy()
    ok["method"], ok["recipe"] = zip(*ok.row.map(method_and_recipe))
    table = ok.groupby(["recipe", "method"], sort=False)[["s/step", "sentences/s", "peak memory (GB)",
                                                          "projected hours"]].median().reset_index()
    for column, ratio in (("s/step", "time ratio to SimCSE"), ("peak memory (GB)", "memory ratio to SimCSE")):
        simcse = table[table.method == "SimCSE"].set_index("recipe")[column]
        table[ratio] = [value / simcse.get(recipe, math.nan) for value, recipe in zip(table[column], table.recipe)]
    return table


def similarities(found: dict[str, list[dict]], recipe: str) -> dict[str, dict[int, dict]]:
    """method -> seed -> task -> test-pair cosines, for one recipe's records (experiments.records' label -> records)."""
    out: dict[str, dict[int, dict]] = {}
    for row, records in found.items():
        method, row_recipe = method_and_recipe(row)
        if row_recipe == recipe:
            out[method] = {record["seed"]: record["metrics"]["sts_pairs"] for record in records}
    return out


def cost_points(scores: pd.DataFrame, costs: pd.DataFrame, recipe: str) -> dict[str, tuple[float, float]]:
    """method -> (projected hours, mean average STS) under one recipe, for the Pareto plot."""
    hours = costs[costs.recipe == recipe].set_index("method")["projected hours"]
    mean = {method_and_recipe(m)[0]: v for m, v in
            zip(scores[scores.recipe == recipe].method, scores[scores.recipe == recipe]["Avg. STS mean"])}
    return {m: (float(hours[m]), float(mean[m])) for m in hours.index if m in mean}


@dataclass
class HeadToHead:
    """Everything the head-to-head shows: per-run columns (`long`), per-method scores, MTEB, the significance
    matrices per recipe and test, the papers' claims in words, and the cost table."""

    long: pd.DataFrame
    scores: pd.DataFrame
    mteb: pd.DataFrame
    costs: pd.DataFrame
    tests: dict = field(default_factory=dict)
    words: list = field(default_factory=list)


def head_to_head(rows_: list[Row], s, recipes: list, transfer: str | None, mteb_tasks: str = "",
                 bootstrap_samples: int = 1000, level: float = 0.05) -> HeadToHead:
    """Train (or reuse) and evaluate every row on s's seeds, then the tables of the head-to-head."""
    from .. import experiments as ex

    evals = evaluations(transfer)
    gold_scores = gold(s.store.data_dir)
    found = ex.records(rows_, s, evals)
    if mteb_tasks:
        evaluate_mteb(found, s.store, mteb_tasks)
    long = with_mteb_average(ex.run_rows(rows_, s, evals, columns(gold_scores, transfer),
                                         start_metrics=start_columns(gold_scores, transfer)))
    out = HeadToHead(long, summary(long), mteb_table(long), cost_table(long))
    for recipe in recipes:
        by_seeds = seed_tests(by_seed(long, recipe))
        boot = bootstrap_tests(similarities(found, recipe), gold_scores, bootstrap_samples)
        out.tests[recipe] = {"paired t-test over seeds": significance_matrix(by_seeds, level),
                             "paired bootstrap over STS pairs": significance_matrix(boot, level)}
        out.words += [f"{recipe}: {line}" for line in claims_in_words(by_seeds, level)]
    return out


def show(h: HeadToHead, level: float) -> None:
    """Display the head-to-head's tables in a notebook (the claims in words, h.words, are the caller's to print)."""
    from IPython.display import display

    from .. import experiments as ex

    display(ex.show_values(h.scores, "Average STS test and transfer test (and MTEB, where the runs have MTEB "
                                     "results) per method and recipe: mean ± std, 95% interval over the seeds, the "
                                     "paper's own number beside its recipe"))
    if len(h.mteb):
        display(ex.show_values(h.mteb, "MTEB main scores ×100 (mteb's own evaluation of the same vectors), mean over "
                                       "the seeds; Avg. MTEB over the tasks every such run has"))
    for recipe, matrices in h.tests.items():
        for name, matrix in matrices.items():
            display(ex.show_values(matrix, f"{recipe}: row − column average STS; * = beyond chance at {level} "
                                          f"({name})"))
    display(ex.show_values(h.costs, "Cost on this machine: median s/step, sentences/s, peak memory, the recipe's full "
                                    "run projected over Wiki1M's 1M sentences, and the ratios to SimCSE"))


def figures(h: HeadToHead, recipe: str) -> tuple[list, list[str]]:
    """(the seed strip and the cost-score Pareto plot of `recipe`, its Pareto front)."""
    from ..experiments import plots

    strip = plots.seed_strip(h.long, "Avg. STS", "Every seed's average STS test per method and recipe")
    points = cost_points(h.scores, h.costs, recipe)
    front = pareto_front(points)
    frontier = plots.pareto(points, front, "projected hours for the full run (this machine)", "average STS test",
                            f"Average STS against training cost ({recipe})")
    return [strip, frontier], front


def profile_note(profile: str, transfer: str | None) -> str:
    """What the recipes and the transfer column are on this profile."""
    said = (f"transfer: SentEval's {transfer.removeprefix('transfer_')} config" if transfer else
            "no transfer evaluation (the notebook's `transfer` parameter asks for one)")
    if sizing(profile) == "smoke":
        return (f"{profile}: the profile's sizes (batch 16, lr 1e-4, 8 steps) override both recipes, so most methods' two "
                f"recipes are the same runs; {said}")
    return f"{profile}: the shared recipe is {SHARED_RECIPE[profile]}; {said}"
