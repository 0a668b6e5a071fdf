"""SentEval's PyTorch logistic-regression classifier, many fits at once.

SentEval trains one `nn.Linear` at a time (re-seeding torch and NumPy with the task seed before each), with
Adam/RMSprop, L2 as the optimizer's weight decay, `epoch_size` passes between dev checks, and stops after
`tenacity` non-improving checks (a count that is never reset) or `max_epoch`. A transfer task trains hundreds of
these tiny models one after another; that loop, not the arithmetic, is its cost.

Here every fit of a task (all regularisation values × all folds) is one slice of a batched model, trained in
lock-step. Each slice sees exactly what SentEval's model would: the same initial weights (seeded generator),
the same minibatch order (a NumPy RandomState seeded like SentEval's global one, drawn in the same order), the
same optimizer arithmetic (torch's Adam/RMSprop update written out per slice, weight decay added to the
gradient as torch does), the same early stopping. Slices whose training has stopped are frozen. Results agree
with SentEval up to float rounding (bmm vs mm); see docs/evaluation.md for the measured agreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class ClassifierConfig:
    optim: str  # "adam" or "rmsprop", torch defaults as SentEval's get_optimizer uses them
    batch_size: int
    tenacity: int
    epoch_size: int
    kfold: int
    max_epoch: int = 200


#: SimCSE's evaluation.py: `test` = SentEval's default config, `dev`/`fasttest` = its prototyping config.
CONFIGS = {
    "test": ClassifierConfig("adam", 64, 5, 4, 10),
    "fasttest": ClassifierConfig("rmsprop", 128, 3, 2, 5),
    "dev": ClassifierConfig("rmsprop", 128, 3, 2, 5),
}
L2_GRID = tuple(10.0 ** t for t in range(-5, -1))  # SentEval's pytorch grid: 1e-5 ... 1e-2


@dataclass
class Fit:
    """One classifier SentEval would train: rows of X to train on, and either rows to validate on or a
    validation fraction split off the training rows with the seeded permutation (SentEval's validation_split)."""

    train: np.ndarray
    l2: float
    valid: np.ndarray | None = None
    valid_split: float | None = None


def initial_weights(dim: int, nclasses: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What `torch.manual_seed(seed); nn.Linear(dim, nclasses)` initialises, without touching global RNG."""
    g = torch.Generator().manual_seed(seed)
    w = torch.empty(nclasses, dim)
    torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)
    bound = 1 / math.sqrt(dim)
    b = torch.empty(nclasses).uniform_(-bound, bound, generator=g)
    return w, b


class _Batched:
    """Per-slice Adam/RMSprop state and update of one (M, ...) parameter, matching torch.optim with default
    hyper-parameters. Both updates are elementwise, so a linear layer's weight and bias are one tensor here."""

    def __init__(self, optim: str, param: torch.Tensor):
        if optim not in ("adam", "rmsprop"):
            raise ValueError(f"unsupported classifier optimizer {optim!r}; SentEval's configs use adam/rmsprop")
        self.optim = optim
        self.param = param
        self.s1, self.s2 = torch.zeros_like(param), torch.zeros_like(param)
        self.steps = np.zeros(param.shape[0])
        self.shape = (-1,) + (1,) * (param.dim() - 1)

    def step(self, grad: torch.Tensor, l2: torch.Tensor, stepping: np.ndarray | None) -> None:
        """`stepping`: which slices step (None: every slice, so the masks can be skipped)."""
        p, s1, s2 = self.param, self.s1, self.s2
        on = None if stepping is None else torch.from_numpy(stepping).to(p.device).view(self.shape)
        self.steps += 1 if stepping is None else stepping
        g = grad + l2.view(self.shape) * p
        if self.optim == "adam":  # lr 1e-3, betas (0.9, 0.999), eps 1e-8
            new1, new2 = s1.lerp(g, 0.1), s2 * 0.999 + g * g * 0.001
            s1.copy_(new1 if on is None else torch.where(on, new1, s1))
            s2.copy_(new2 if on is None else torch.where(on, new2, s2))
            t = np.maximum(self.steps, 1)
            step_size = self._column(1e-3 / (1 - 0.9 ** t))
            c2_sqrt = self._column(np.sqrt(1 - 0.999 ** t))
            update = step_size * s1 / (s2.sqrt() / c2_sqrt + 1e-8)
        else:  # lr 1e-2, alpha 0.99, eps 1e-8
            new1 = s1 * 0.99 + g * g * 0.01
            s1.copy_(new1 if on is None else torch.where(on, new1, s1))
            update = 1e-2 * g / (s1.sqrt() + 1e-8)
        p.sub_(update if on is None else torch.where(on, update, torch.zeros_like(update)))

    def _column(self, values: np.ndarray) -> torch.Tensor:
        """One float64 value per slice (Adam's bias corrections), cast to the parameter's dtype as torch.optim
        does, shaped to broadcast over the slice."""
        return torch.from_numpy(values).to(self.param.dtype).to(self.param.device).view(self.shape)


def _pad(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(r) for r in rows))
    idx = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        idx[i, :len(r)] = r
        mask[i, :len(r)] = True
    return torch.from_numpy(idx), torch.from_numpy(mask)


def _split_rows(fits: list[Fit], seed: int):
    """Training and validation rows of every fit, and the RandomState key of each (SentEval re-seeds per model,
    first draws the validation split, if any, then one permutation per pass: fits with the same training size
    and split rule draw identical permutations, so one RandomState serves each such key)."""
    rngs: dict[tuple, np.random.RandomState] = {}
    split_perms: dict[tuple, np.ndarray] = {}
    train_rows, valid_rows, keys = [], [], []
    for f in fits:
        key = (len(f.train), f.valid_split)
        if key not in rngs:
            rngs[key] = np.random.RandomState(seed)
            if f.valid_split is not None:
                split_perms[key] = rngs[key].permutation(len(f.train))
        if f.valid_split is not None:
            perm, cut = split_perms[key], int(f.valid_split * len(f.train))
            train_rows.append(f.train[perm[cut:]])
            valid_rows.append(f.train[perm[:cut]])
        else:
            train_rows.append(f.train)
            valid_rows.append(f.valid)
        keys.append(key)
    return rngs, train_rows, valid_rows, keys


def _row_groups(train_rows: list[np.ndarray], keys: list[tuple]) -> list[list[int]]:
    """Fits that see the very same minibatches (same rows, same permutation stream), e.g. one fold's L2 grid.
    Each group's minibatch is gathered once and multiplied with all its members' weights in one GEMM. Groups
    must be equally large to be stacked; otherwise every fit is its own group."""
    groups: dict[tuple, list[int]] = {}
    for i, (rows, key) in enumerate(zip(train_rows, keys)):
        groups.setdefault((key, rows.tobytes()), []).append(i)
    out = list(groups.values())
    return out if len({len(g) for g in out}) == 1 else [[i] for i in range(len(train_rows))]


def fit_many(X: torch.Tensor, y: torch.Tensor, fits: list[Fit], nclasses: int, cfg: ClassifierConfig,
             seed: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Train every fit; returns the best-on-validation weights (M, C, D), biases (M, C) and validation
    accuracies (M,), exactly as SentEval's PyTorchClassifier.fit would leave each model."""
    device, D = X.device, X.shape[1]
    rngs, train_rows, valid_rows, keys = _split_rows(fits, seed)
    groups = _row_groups(train_rows, keys)
    G, R = len(groups), len(groups[0])
    # internally slices are ordered group by group, so the weights view as (G, R, C, D + 1)
    order = np.array([i for g in groups for i in g])
    fits = [fits[i] for i in order]
    valid_rows = [valid_rows[i] for i in order]
    M = len(fits)
    ntrain = {key: len(rows) for key, rows in zip(keys, train_rows)}

    w0, b0 = initial_weights(D, nclasses, seed)
    P = torch.cat([w0, b0.unsqueeze(1)], 1).to(device).repeat(M, 1, 1)  # weight | bias, (M, C, D + 1)
    W, B = P[..., :D].view(G, R, nclasses, D), P[..., D].view(G, R, 1, nclasses)
    best_P = P.clone()
    opt = _Batched(cfg.optim, P)
    l2 = torch.tensor([f.l2 for f in fits], dtype=X.dtype, device=device)
    v_idx, v_mask = (t.to(device) for t in _pad(valid_rows))
    v_n = v_mask.sum(1).to(torch.float64)
    y_valid = y[v_idx]

    best = np.full(M, -1.0)
    strikes = np.zeros(M, dtype=int)
    active = np.ones(M, dtype=bool)
    nepoch = 0
    bs = cfg.batch_size
    while active.any() and nepoch <= cfg.max_epoch:
        # only groups with a slice still training are computed: a third of the group-steps were stopped ones
        # (CR, TREC, MRPC on all-MiniLM-L6-v2, `test` mode); a stopped slice's step was masked out anyway
        live = np.flatnonzero(active.reshape(G, R).any(1))
        every = len(live) == G
        live_t = torch.from_numpy(live).to(device)
        g = len(live)
        # the stopped groups' rows of every step stay zero (opt.step reads the step, never writes it): one buffer
        full_step = None if every else torch.zeros(G, R, nclasses, D + 1, dtype=P.dtype, device=device)
        for _ in range(cfg.epoch_size):
            perms = {key: rng.permutation(ntrain[key]) for key, rng in rngs.items()}  # drawn for every group
            o_idx, o_mask = (t.to(device) for t in _pad([train_rows[groups[i][0]][perms[keys[groups[i][0]]]]
                                                         for i in live]))
            rows = np.zeros(G, dtype=np.int64)
            rows[live] = o_mask.sum(1).cpu().numpy()  # rows per group this pass (none for stopped groups)
            o_y = y[o_idx]
            for s in range(0, o_idx.shape[1], bs):
                count = np.clip(rows - s, 0, bs)  # rows of each group in this minibatch
                stepping = active & np.repeat(count > 0, R)
                count = count[live]
                idx = o_idx[:, s:s + bs]  # index_select: a 10x faster gather than X[idx] for a sliced 2-D idx
                xb = X.index_select(0, idx.reshape(-1)).view(*idx.shape, D)  # (g, b, D)
                Wl, Bl = (W, B) if every else (W.index_select(0, live_t), B.index_select(0, live_t))
                logits = torch.einsum("gbd,grcd->grbc", xb, Wl) + Bl
                grad = torch.softmax(logits, -1)
                yb = o_y[:, s:s + bs]
                grad.scatter_add_(-1, yb.view(g, 1, -1, 1).expand(g, R, -1, 1), -torch.ones_like(grad[..., :1]))
                if (count == count[0]).all():  # the mean over the minibatch, the same size in every group
                    grad *= 1 / int(count[0])
                else:
                    scale = o_mask[:, s:s + bs] / torch.from_numpy(np.maximum(count, 1)).to(device).unsqueeze(1)
                    grad *= scale.view(g, 1, -1, 1).to(grad.dtype)
                dW = torch.einsum("grbc,gbd->grcd", grad, xb)
                step = torch.cat([dW, grad.sum(2).unsqueeze(-1)], -1)
                if not every:
                    step = full_step.index_copy_(0, live_t, step)
                opt.step(step.view(M, nclasses, D + 1), l2, None if stepping.all() else stepping)
        nepoch += cfg.epoch_size
        # validation accuracy of every slice: one GEMM over all rows, then each slice's rows
        pred = (X @ W.reshape(-1, D).T + B.reshape(1, -1)).view(len(X), M, nclasses).argmax(-1)
        correct = ((pred.T.gather(1, v_idx) == y_valid) & v_mask).sum(1)
        acc = (correct.to(torch.float64) / v_n).cpu().numpy()
        improved = active & (acc > best)
        if improved.any():
            sel = torch.from_numpy(improved).to(device)
            best_P[sel] = P[sel]
            best[improved] = acc[improved]
        worse = active & ~improved
        active[worse & (strikes >= cfg.tenacity)] = False
        strikes[worse] += 1
    back = torch.from_numpy(np.argsort(order)).to(device)
    best_P = best_P[back]
    return best_P[..., :D], best_P[..., D], best[np.argsort(order)]


def predict(X: torch.Tensor, W: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """(M, N) class predictions of each slice on rows X (N, D)."""
    return (torch.einsum("nd,mcd->mnc", X, W) + B.unsqueeze(1)).argmax(-1)
