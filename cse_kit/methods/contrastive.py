"""The shared core of every method: projectors, the cosine matrix, and rows gathered across processes (with
gradient), so a multi-process run computes the loss of one process on the global batch (the kit's InfoNCE is
Objective.info_nce)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .batchnorm import GlobalBatchNorm1d


class MLPProjector(nn.Sequential):
    """SimCSE's MLPLayer: Linear(d, d) + tanh (what BERT's NSP pooler looks like, freshly initialised)."""

    def __init__(self, hidden: int):
        super().__init__(nn.Linear(hidden, hidden), nn.Tanh())


class BatchNormProjector(nn.Sequential):
    """DiffCSE's ProjectionMLP, App. A verbatim: Linear(d, 2d, no bias) -> BatchNorm1d(2d) -> ReLU ->
    Linear(2d, d, no bias) -> BatchNorm1d(d, affine=False). Applied to both views at once, as the official code
    does, so the batch statistics mix the views. Several processes normalise with the statistics of the global
    batch (so N processes train what one does), unless per_process: each process's own rows, as the official code
    on several GPUs (plain nn.BatchNorm1d under DDP, no SyncBatchNorm)."""

    def __init__(self, hidden: int, per_process: bool = False):
        norm = nn.BatchNorm1d if per_process else GlobalBatchNorm1d
        super().__init__(nn.Linear(hidden, 2 * hidden, bias=False), norm(2 * hidden), nn.ReLU(),
                         nn.Linear(2 * hidden, hidden, bias=False), norm(hidden, affine=False))


class NoProjector(nn.Identity):
    """No projector: the pooled vector itself."""

    def __init__(self, hidden: int):
        super().__init__()


#: "none": the pooled vector itself, as the official code trains with any pooler but `cls` (SimCSE
#: simcse/models.py:92, DiffCSE diffcse/models.py:118 build the MLP only for `--pooler_type cls`)
PROJECTORS = {"mlp": MLPProjector, "batchnorm": BatchNormProjector, "none": NoProjector,
              "batchnorm-per-process": lambda hidden: BatchNormProjector(hidden, per_process=True)}


def init_like_official(module: nn.Module, std: float = 0.02) -> nn.Module:
    """The official `cl_init` calls `init_weights()` after building the MLP (SimCSE simcse/models.py:95, DiffCSE
    diffcse/models.py:121), i.e. BERT's `_init_weights`: Linear weights N(0, initializer_range), zero biases.
    BatchNorm is not touched there, so it keeps torch's default (weight 1, bias 0), as here."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, mean=0.0, std=std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module


def make_projector(kind: str, hidden: int, init_std: float = 0.02) -> nn.Module:
    """The training projector, initialised as the official code initialises it (`init_std` is the encoder's
    `initializer_range`, 0.02 for BERT and RoBERTa)."""
    if kind not in PROJECTORS:
        raise ValueError(f"unknown projector {kind!r}; choose one of: {', '.join(PROJECTORS)}")
    return init_like_official(PROJECTORS[kind](hidden), init_std)


def projector_for(kind: str, encoder: nn.Module) -> nn.Module:
    """The training projector of `encoder`'s width, initialised with its initializer_range (make_projector)."""
    return make_projector(kind, encoder.config.hidden_size, getattr(encoder.config, "initializer_range", 0.02))


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """All processes' rows, in rank order. Backward sums every process's gradient into the local rows, so after
    DDP averages the parameter gradients they equal the single-process gradient of the global-batch loss."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return x
    if torch.distributed.get_world_size() == 1:
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x), dim=0)


class _GradientShare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, share):
        ctx.share = share
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.share, None


def official_share(loss: torch.Tensor, processes: int) -> torch.Tensor:
    """`loss` with 1/processes of its gradient, its value unchanged: the update of an official run on `processes`
    DDP processes, on any number of processes here. There each process computes the whole gathered loss, but the
    gradient flows through its own rows only (the other rows come from all_gather without gradient: SimCSE
    simcse/models.py:171-189, which Prompt-BERT and DiffAug copy), and DDP averages the processes' gradients:
    (1/P) sum_r dL/d(rows of r) = (1/P) grad L. gather_with_grad gives grad L on any number of processes."""
    return loss if processes == 1 else _GradientShare.apply(loss, 1.0 / processes)


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T

