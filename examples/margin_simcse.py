"""SimCSE with an additive margin on each positive pair's cosine: a method of one's own in 30 lines."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cse_kit.methods import Objective, register


@register("margin-simcse")
class MarginSimCSE(Objective):
    """InfoNCE over cos(z1_i, z2_j) / temp, with `margin` taken off each positive's cosine."""

    @dataclass
    class Options:
        margin: float = 0.1  # subtracted from cos(z1_i, z2_i) before the softmax

        def __post_init__(self):
            if not 0 <= self.margin < 1:
                raise ValueError(f"margin must be in [0, 1), got {self.margin}")

    def loss(self, z):  # z: (rows, views, hidden), the training vector of each view
        a, b = F.normalize(self.gather(z[:, 0]), dim=-1), F.normalize(self.gather(z[:, 1]), dim=-1)  # all GPUs' rows
        cos = a @ b.T - self.options.margin * torch.eye(len(a), device=a.device)
        return F.cross_entropy(cos / self.temp, torch.arange(len(a), device=a.device))
