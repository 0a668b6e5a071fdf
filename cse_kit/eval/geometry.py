"""Embedding geometry and retrieval on the STS-B test set (DiffCSE Tables 9-11 and Figure 2; SCD Figure 2)."""

from __future__ import annotations

import numpy as np

from ..data import load_sts
from .sts import pair_scores

#: Gold-score groups of DiffCSE Figure 2.
GOLD_BINS = ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0), (4.0, 5.0))


def normalize_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def alignment(a: np.ndarray, b: np.ndarray, alpha: float = 2.0) -> float:
    """ℓ_align = E ||f(x) - f(x+)||^alpha over positive pairs, with f L2-normalised (Wang & Isola 2020)."""
    return float((np.linalg.norm(normalize_rows(a) - normalize_rows(b), axis=1) ** alpha).mean())


def uniformity(x: np.ndarray, t: float = 2.0) -> float:
    """ℓ_uniform = log E exp(-t ||f(x) - f(y)||^2) over all pairs of distinct rows (i < j), f L2-normalised."""
    z = normalize_rows(x)
    sq = np.clip(2.0 - 2.0 * z @ z.T, 0.0, None)  # squared distance of unit vectors
    iu = np.triu_indices(len(z), k=1)
    v = -t * sq[iu]
    m = v.max()
    return float(m + np.log(np.exp(v - m).mean()))


def align_uniform(encoder, data_dir=None, positive_threshold: float = 4.0) -> dict:
    """Alignment over STS-B test pairs with gold score > positive_threshold (SimCSE's convention; DiffCSE does not
    define p_pos) and uniformity over all distinct STS-B test sentences."""
    pairs = load_sts("STSBenchmark", "test", data_dir)
    pos = [p for p in pairs if p.score > positive_threshold]
    sentences = list(dict.fromkeys(s for p in pairs for s in (p.sent1, p.sent2)))
    return {"alignment": alignment(encoder.encode([p.sent1 for p in pos]), encoder.encode([p.sent2 for p in pos])),
            "uniformity": uniformity(encoder.encode(sentences)), "n_positive": len(pos),
            "n_sentences": len(sentences), "positive_threshold": positive_threshold}


def sts_filter_align_uniform(encoder, data_dir=None, split: str = "test", positive_threshold: float = 4.0,
                             batch_size: int = 128) -> dict:
    """Alignment and uniformity as SCD's official code computes them (SentEval/senteval/sts_filter.py, task
    STSFilterBenchmark, at fb1438a): the STS-B `split` pairs with gold >= 4 (not > 4), sorted by the two sentences'
    word counts then gold as SentEval does, embedded WITHOUT L2 normalisation (their evaluation.py batcher returns
    raw vectors), alignment = mean squared distance of the pairs, and uniformity of the rows ref - random, where
    `random` is the first sentence itself for the first batch of `batch_size` pairs (SentEval's 128) and the second
    sentence after that: log mean exp(-2 d^2) over all pairs of those difference rows. Not Wang & Isola's
    quantities (which normalise and take uniformity over sentences): on another scale, never compare the two."""
    pairs = [p for p in load_sts("STSBenchmark", split, data_dir) if p.score >= positive_threshold]
    pairs = sorted(pairs, key=lambda p: (len(p.sent1.split()), len(p.sent2.split()), p.score))
    a = np.asarray(encoder.encode([p.sent1 for p in pairs]), dtype=np.float64)
    b = np.asarray(encoder.encode([p.sent2 for p in pairs]), dtype=np.float64)
    difference = a - np.concatenate([a[:batch_size], b[batch_size:]])
    sq = np.clip((difference ** 2).sum(1)[:, None] + (difference ** 2).sum(1)[None, :] - 2 * difference @ difference.T,
                 0.0, None)
    v = -2.0 * sq[np.triu_indices(len(difference), k=1)]
    m = v.max()
    return {"alignment": float(((a - b) ** 2).sum(1).mean()), "uniformity": float(m + np.log(np.exp(v - m).mean())),
            "n_positive": len(pairs), "split": split, "positive_threshold": positive_threshold}


def similarity_by_gold_bin(encoder, data_dir=None, bins=GOLD_BINS) -> dict:
    """Cosine similarity of every STS-B test pair, grouped by gold score (the last bin includes its upper edge)."""
    pairs = load_sts("STSBenchmark", "test", data_dir)
    sims, gold = pair_scores(encoder, pairs)
    out = {}
    for i, (lo, hi) in enumerate(bins):
        sel = (gold >= lo) & ((gold <= hi) if i == len(bins) - 1 else (gold < hi))
        s = sims[sel]
        out[f"{lo:g}-{hi:g}"] = {"n": int(sel.sum()), "mean": float(s.mean()) if len(s) else float("nan"),
                                 "std": float(s.std()) if len(s) else float("nan"), "values": s.tolist()}
    return out


def retrieval_recall(encoder, data_dir=None, ks=(1, 5, 10), score: float = 5.0) -> dict:
    """Recall@k of retrieving the partner of each STS-B test pair with gold == score, among all 2 x 1379 sentence
    slots of the test set, with queries in both directions and the query's own slot excluded."""
    pairs = load_sts("STSBenchmark", "test", data_dir)
    n = len(pairs)
    pool = normalize_rows(encoder.encode([p.sent1 for p in pairs] + [p.sent2 for p in pairs]))
    chosen = [i for i, p in enumerate(pairs) if p.score == score]
    queries = np.array(chosen + [i + n for i in chosen])
    targets = np.array([i + n for i in chosen] + chosen)
    sims = pool[queries] @ pool.T
    sims[np.arange(len(queries)), queries] = -np.inf
    target_sim = sims[np.arange(len(queries)), targets]
    rank = (sims > target_sim[:, None]).sum(1)  # 0 = the partner is the nearest
    return {"n_pairs": len(chosen), "n_queries": len(queries), "pool": 2 * n,
            **{f"recall@{k}": float(100 * (rank < k).mean()) for k in ks}}


def nearest(encoder, queries: list[str], pool: list[str], k: int = 3) -> list[list[tuple[str, float]]]:
    """The k most similar pool sentences to each query (a query's identical copies in the pool excluded)."""
    q = normalize_rows(encoder.encode(queries))
    p = normalize_rows(encoder.encode(pool))
    sims = q @ p.T
    out = []
    for qi, row in enumerate(sims):
        order = [j for j in np.argsort(-row, kind="stable") if pool[j] != queries[qi]][:k]
        out.append([(pool[j], float(row[j])) for j in order])
    return out
