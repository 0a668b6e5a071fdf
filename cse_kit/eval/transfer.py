"""SentEval's seven transfer tasks with its protocol: the same sample order (SentEval sorts by length before
building features, and the order decides the folds), features, fold logic, L2 grid, rounding and seeds."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..data import load_classification
from .classifier import CONFIGS, L2_GRID, ClassifierConfig, Fit, fit_many, predict

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
NCLASSES = {"MR": 2, "CR": 2, "SUBJ": 2, "MPQA": 2, "SST2": 2, "TREC": 6, "MRPC": 2}


def _ntok(text: str) -> int:
    return len(text.split())


@dataclass
class TaskData:
    """Sentences to encode, in SentEval's order, per split."""

    task: str
    splits: dict[str, list]  # split -> records (LabelledSentence or LabelledPair), sorted as SentEval sorts them

    def sentences(self) -> list[str]:
        out = []
        for records in self.splits.values():
            for r in records:
                out.extend([r.sent1, r.sent2] if hasattr(r, "sent1") else [r.text])
        return out


#: a class keeps at least this many records in a sample (SentEval's k-fold splits put each class in every fold)
SAMPLE_MIN_PER_CLASS = 10


def sample_records(records: list, size: int, seed: int = 1111) -> list:
    """At most `size` records, each class keeping its share of them (at least SAMPLE_MIN_PER_CLASS), drawn with a
    fixed seed and kept in file order, so SentEval's stable sort then orders them as it orders the whole split."""
    if len(records) <= size:
        return records
    rng = np.random.RandomState(seed)
    labels = np.array([r.label for r in records])
    chosen = []
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        take = min(len(rows), max(SAMPLE_MIN_PER_CLASS, round(size * len(rows) / len(records))))
        chosen.append(rng.choice(rows, take, replace=False))
    return [records[i] for i in np.sort(np.concatenate(chosen))]


def load_task(task: str, data_dir=None, sample: int | None = None) -> TaskData:
    """A task's splits in SentEval's order; `sample`: at most that many records per split (sample_records), for
    profiles whose numbers only check the pipeline (smoke)."""
    if task not in TRANSFER_TASKS:
        raise ValueError(f"{task} is not a transfer task; choose from {', '.join(TRANSFER_TASKS)}")
    if task == "MRPC":
        key = lambda r: (_ntok(r.sent1), _ntok(r.sent2), r.label)  # noqa: E731
        splits = ("train", "test")
    else:
        key = lambda r: (_ntok(r.text), r.label)  # noqa: E731
        splits = {"SST2": ("train", "dev", "test"), "TREC": ("train", "test")}.get(task, ("all",))
    # Python's sort is stable, as in SentEval: ties keep file order (positives first for the binary tasks)
    def records(split):
        loaded = load_classification(task, split, data_dir)
        return sample_records(loaded, sample) if sample else loaded

    return TaskData(task, {s: sorted(records(s), key=key) for s in splits})


def features(encoder, records) -> np.ndarray:
    if hasattr(records[0], "sent1"):  # MRPC: [|u - v|, u * v]
        a = encoder.encode([r.sent1 for r in records])
        b = encoder.encode([r.sent2 for r in records])
        return np.concatenate([np.abs(a - b), a * b], axis=1)
    return encoder.encode([r.text for r in records])


def _r2(x: float) -> float:
    return round(float(x), 2)


def inner_kfold(X, y, cfg: ClassifierConfig, seed: int, nclasses: int) -> tuple[float, float]:
    """SentEval's InnerKFoldClassifier (MR, CR, SUBJ, MPQA). Its fold splits use the literal seed 1111.

    SentEval refits each outer fold with the L2 its inner folds chose, after the grid. Here the refit is trained
    for every L2 alongside the grid (it does not depend on the grid's outcome, only which one is kept does), so
    the task is one batched run instead of two in sequence."""
    from sklearn.model_selection import StratifiedKFold  # here: 1.3 CPU-seconds to import, for transfer tests only

    skf = StratifiedKFold(n_splits=cfg.kfold, shuffle=True, random_state=1111)
    y_np = y.cpu().numpy()
    outer = list(skf.split(np.zeros(len(y_np)), y_np))
    grid = []
    for train, _ in outer:
        inner = list(skf.split(np.zeros(len(train)), y_np[train]))
        grid += [Fit(train[itr], reg, valid=train[ite]) for reg in L2_GRID for itr, ite in inner]
    refits = [Fit(train, reg, valid_split=0.05) for train, _ in outer for reg in L2_GRID]
    W, B, acc = fit_many(X, y, grid + refits, nclasses, cfg, seed)
    acc = acc[:len(grid)].reshape(len(outer), len(L2_GRID), cfg.kfold)
    scores = np.array([[_r2(100 * a.mean()) for a in per_outer] for per_outer in acc])
    best = scores.argmax(1)  # the first best, as np.argmax in SentEval
    tests = []
    for m, (_, test) in enumerate(outer):
        k = len(grid) + m * len(L2_GRID) + best[m]
        test_t = torch.from_numpy(test).to(X.device)
        tests.append(_r2(100 * (predict(X[test_t], W[k:k + 1], B[k:k + 1])[0] == y[test_t]).double().mean()))
    return _r2(np.mean(scores.max(1))), _r2(np.mean(tests))


def kfold(X, y, X_test, y_test, cfg: ClassifierConfig, seed: int, nclasses: int):
    """SentEval's KFoldClassifier (TREC, MRPC): pick L2 by k-fold CV on train, refit with a 5% validation split
    (trained for every L2 alongside the grid, see inner_kfold). Returns dev accuracy, test accuracy and test predictions."""
    from sklearn.model_selection import StratifiedKFold

    skf = StratifiedKFold(n_splits=cfg.kfold, shuffle=True, random_state=seed)
    folds = list(skf.split(np.zeros(len(y)), y.cpu().numpy()))
    grid = [Fit(tr, reg, valid=te) for reg in L2_GRID for tr, te in folds]
    refits = [Fit(np.arange(len(y)), reg, valid_split=0.05) for reg in L2_GRID]  # as in inner_kfold
    W, B, acc = fit_many(X, y, grid + refits, nclasses, cfg, seed)
    scores = np.array([_r2(100 * a.mean()) for a in acc[:len(grid)].reshape(len(L2_GRID), cfg.kfold)])
    best = int(scores.argmax())
    k = len(grid) + best
    yhat = predict(X_test, W[k:k + 1], B[k:k + 1])[0]
    return float(scores[best]), _r2(100 * (yhat == y_test).double().mean()), yhat.cpu().numpy()


def split_classifier(X, y, X_dev, y_dev, X_test, y_test, cfg, seed, nclasses):
    """SentEval's SplitClassifier (SST2). Its final refit with the chosen L2 repeats a deterministic run of the
    grid, so the grid's model is the final model."""
    Xall = torch.cat([X, X_dev])
    yall = torch.cat([y, y_dev])
    train, dev = np.arange(len(y)), np.arange(len(y), len(yall))
    W, B, acc = fit_many(Xall, yall, [Fit(train, reg, valid=dev) for reg in L2_GRID], nclasses, cfg, seed)
    scores = np.array([_r2(100 * a) for a in acc])
    best = int(scores.argmax())
    test = _r2(100 * (predict(X_test, W[best:best + 1], B[best:best + 1])[0] == y_test).double().mean())
    return float(scores[best]), test


def _f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    tp = float(((y_pred == 1) & (y_true == 1)).sum())
    denom = float((y_pred == 1).sum() + (y_true == 1).sum())
    return 100 * 2 * tp / denom if denom else 0.0


def evaluate_transfer_task(encoder, data: TaskData, mode: str = "fasttest", seed: int = 1111,
                           device: str | torch.device | None = None, nclasses: int | None = None) -> dict:
    """{"devacc", "acc", "ndev", "ntest"} (+ "f1" for MRPC) as SentEval reports them, plus timings. A task with one
    split ("all": MR, CR, SUBJ, MPQA, a classification CSV of one's own, whose `nclasses` is given) is
    cross-validated."""
    cfg = CONFIGS[mode]
    device = torch.device(device) if device is not None else encoder.device
    nclasses = nclasses or NCLASSES[data.task]
    t0 = time.perf_counter()
    feats = {s: torch.from_numpy(features(encoder, recs)).to(device) for s, recs in data.splits.items()}
    labels = {s: torch.tensor([r.label for r in recs], device=device) for s, recs in data.splits.items()}
    t1 = time.perf_counter()
    if set(data.splits) == {"all"}:
        devacc, acc = inner_kfold(feats["all"], labels["all"], cfg, seed, nclasses)
        out = {"devacc": devacc, "acc": acc, "ndev": len(labels["all"]), "ntest": len(labels["all"])}
    elif data.task == "SST2":
        devacc, acc = split_classifier(feats["train"], labels["train"], feats["dev"], labels["dev"],
                                       feats["test"], labels["test"], cfg, seed, nclasses)
        out = {"devacc": devacc, "acc": acc, "ndev": len(labels["dev"]), "ntest": len(labels["test"])}
    else:
        devacc, acc, yhat = kfold(feats["train"], labels["train"], feats["test"], labels["test"], cfg, seed,
                                  nclasses)
        out = {"devacc": devacc, "acc": acc, "ndev": len(labels["train"]), "ntest": len(labels["test"])}
        if data.task == "MRPC":
            out["f1"] = _r2(_f1(labels["test"].cpu().numpy(), yhat))
    out["seconds"] = {"features": t1 - t0, "classifier": time.perf_counter() - t1}
    return out
