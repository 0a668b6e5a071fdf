"""BatchNorm over the global batch when several processes train: each process holds a share of the rows, and a
plain BatchNorm1d would normalise with its own share's statistics, so N processes would not train the model one
process trains on the same global batch. torch's SyncBatchNorm does this on GPUs only; this one all-reduces the
statistics (with autograd) on any backend, gloo included."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def _sum_over_processes(x: torch.Tensor) -> torch.Tensor:
    from torch.distributed.nn.functional import all_reduce  # differentiable: gradients flow to every share

    return all_reduce(x, op=dist.ReduceOp.SUM)


class GlobalBatchNorm1d(nn.BatchNorm1d):
    """nn.BatchNorm1d whose training statistics are those of the rows of every process (two passes: the mean,
    then the mean squared deviation, as BatchNorm1d computes them); evaluation uses the running statistics."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        n = _sum_over_processes(torch.tensor(float(x.shape[0]), device=x.device, dtype=x.dtype))
        mean = _sum_over_processes(x.sum(0)) / n
        var = _sum_over_processes(((x - mean) ** 2).sum(0)) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                self.running_mean.lerp_(mean.detach(), momentum)
                self.running_var.lerp_(var.detach() * n / (n - 1), momentum)  # unbiased, as BatchNorm1d keeps it
        y = (x - mean) / torch.sqrt(var + self.eps)
        return y * self.weight + self.bias if self.affine else y


def globalize_batchnorm(module: nn.Module) -> int:
    """Replace every nn.BatchNorm1d in module by a GlobalBatchNorm1d holding the same parameters and buffers, in
    place. Returns how many were replaced."""
    replaced = 0
    for name, child in module.named_children():
        if type(child) is nn.BatchNorm1d:
            sync = GlobalBatchNorm1d(child.num_features, child.eps, child.momentum, child.affine,
                                     child.track_running_stats, device=child.weight.device if child.affine else None)
            sync.load_state_dict(child.state_dict())
            sync.train(child.training)
            setattr(module, name, sync)
            replaced += 1
        else:
            replaced += globalize_batchnorm(child)
    return replaced
