"""STS evaluation as SimCSE's SentEval fork computes it: cosine similarity against gold scores, Spearman and
Pearson ×100 (unrounded), with the `all` (concatenate subsets, one correlation), `mean` and `wmean` aggregations
for STS12-16, and unsupervised cosine on the dev/test splits of STS-B and SICK-R."""

from __future__ import annotations

import numpy as np

from ..data import StsPair, load_sts

STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
SPLIT_TASKS = ("STSBenchmark", "SICKRelatedness")


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine, NaN (zero vectors) mapped to 0 as SentEval does."""
    a = np.nan_to_num(a.astype(np.float64))
    b = np.nan_to_num(b.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.nan_to_num(sims)


def correlations(sys_scores, gold) -> dict:
    # imported here: scipy.stats takes about a CPU-second to import, and every notebook kernel of a report imports
    # this module, most of them only to read finished records
    from scipy.stats import pearsonr, spearmanr

    return {"spearman": 100 * float(spearmanr(sys_scores, gold)[0]),
            "pearson": 100 * float(pearsonr(sys_scores, gold)[0])}


def aggregate(sims: np.ndarray, gold: np.ndarray, subsets: list[str]) -> dict:
    """Per-subset correlations and the three aggregations over them."""
    names = list(dict.fromkeys(subsets))
    subsets = np.asarray(subsets)
    per = {}
    for name in names:
        sel = subsets == name
        per[name] = {**correlations(sims[sel], gold[sel]), "n": int(sel.sum())}
    weights = np.array([per[n]["n"] for n in names], dtype=float)
    out = {"all": correlations(sims, gold)}
    for agg, w in (("mean", None), ("wmean", weights)):
        out[agg] = {m: float(np.average([per[n][m] for n in names], weights=w)) for m in ("spearman", "pearson")}
    out["n"] = int(len(gold))
    out["subsets"] = per
    return out


def pair_scores(encoder, pairs: list[StsPair]) -> tuple[np.ndarray, np.ndarray]:
    a = encoder.encode([p.sent1 for p in pairs])
    b = encoder.encode([p.sent2 for p in pairs])
    return cosine_rows(a, b), np.array([p.score for p in pairs])


def sts_pairs(task: str, mode: str, data_dir=None, sample: int | None = None) -> dict[str, list[StsPair]]:
    """The pairs a task needs in a mode, keyed by split: STS12-16 test; STS-B/SICK-R dev (+ test unless dev).
    `sample`: at most that many pairs of each subset (sample_pairs), for profiles whose numbers only check the
    pipeline (smoke)."""
    if task in STS_YEARS:
        splits = {"test": load_sts(task, data_dir=data_dir)}
    elif task in SPLIT_TASKS:
        splits = {s: load_sts(task, s, data_dir) for s in (("dev",) if mode == "dev" else ("dev", "test"))}
    else:
        raise ValueError(f"{task} is not an STS task; choose from {', '.join(STS_YEARS + SPLIT_TASKS)}")
    return {split: sample_pairs(pairs, sample) if sample else pairs for split, pairs in splits.items()}


def sample_pairs(pairs: list[StsPair], size: int, seed: int = 1111) -> list[StsPair]:
    """At most `size` pairs of each subset (STS12-16's topics; STS-B's and SICK-R's split), drawn with a fixed
    seed and kept in file order, so every aggregation still has each subset."""
    rng = np.random.RandomState(seed)
    subsets = np.array([p.subset for p in pairs])
    chosen = [rows if len(rows) <= size else rng.choice(rows, size, replace=False)
              for rows in (np.flatnonzero(subsets == name) for name in dict.fromkeys(subsets.tolist()))]
    return [pairs[i] for i in np.sort(np.concatenate(chosen))]


def evaluate_sts_task(encoder, task: str, pairs: dict[str, list[StsPair]]) -> dict:
    if task in STS_YEARS:
        ps = pairs["test"]
        sims, gold = pair_scores(encoder, ps)
        return aggregate(sims, gold, [p.subset for p in ps])
    out = {}
    for split, ps in pairs.items():
        sims, gold = pair_scores(encoder, ps)
        out[split] = {**correlations(sims, gold), "n": len(ps)}
    return out


def test_pairs(task: str, data_dir=None) -> list[StsPair]:
    """The pairs behind a task's headline number: STS12-16 test (all subsets), STS-B and SICK-R test."""
    return load_sts(task, data_dir=data_dir) if task in STS_YEARS else load_sts(task, "test", data_dir)


def test_similarities(encoder, data_dir=None) -> dict[str, list[float]]:
    """Each STS task's test-pair cosines, in test_pairs' order, every digit kept (a bootstrap over the pairs
    recomputes the correlations from them, the gold scores being the data's: from these, each task's Spearman is the
    protocol's exactly; rounded, near-ties could swap ranks)."""
    return {task: [float(x) for x in pair_scores(encoder, test_pairs(task, data_dir))[0]]
            for task in STS_YEARS + SPLIT_TASKS}


def headline(task: str, result: dict, split: str = "test") -> float:
    """The number the papers report: `all` Spearman for STS12-16, test (or dev) Spearman for STS-B/SICK-R."""
    return result["all"]["spearman"] if task in STS_YEARS else result[split]["spearman"]


__all__ = ["STS_YEARS", "SPLIT_TASKS", "aggregate", "correlations", "cosine_rows", "evaluate_sts_task",
           "headline", "pair_scores", "sts_pairs", "test_pairs", "test_similarities"]
