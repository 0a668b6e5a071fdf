"""SimCSE (Gao et al. 2021): unsupervised (two dropout views of each sentence) and supervised (NLI triplets with
hard negatives). The projector is training-only; the exported model is the bare encoder."""

from __future__ import annotations

import torch
from torch import nn

from ..eval.encode import check_pooler, pool
from .contrastive import info_nce, make_projector


class SimCSE(nn.Module):
    """Batch: input_ids / attention_mask (/ token_type_ids) of shape (batch, views, length): 2 views (the same
    sentence twice) for unsupervised SimCSE, 3 (anchor, entailment, contradiction) for supervised."""

    method = "simcse"

    def __init__(self, encoder: nn.Module, *, pooler: str = "cls_before_pooler", projector: str = "mlp",
                 temp: float = 0.05, hard_negative_weight: float = 0.0):
        super().__init__()
        if temp <= 0:
            raise ValueError(f"temperature must be positive, got {temp}")
        self.encoder = encoder
        self.pooler = check_pooler(pooler)
        self.projector_kind = projector
        self.projector = make_projector(projector, encoder.config.hidden_size)
        self.temp = temp
        self.hard_negative_weight = hard_negative_weight

    @staticmethod
    def common_options(cfg) -> dict:
        """What every SimCSE-based objective takes from the training configuration."""
        return {"pooler": cfg.pooler, "projector": cfg.projector, "temp": cfg.temp,
                "hard_negative_weight": cfg.hard_negative_weight}

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "SimCSE":
        return cls(encoder, **cls.common_options(cfg))

    def encode_views(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(pooled, projected), both (batch * views, hidden): all views in one encoder pass, so each row gets its
        own dropout mask, and the projector sees all views at once (as the official code)."""
        flat = {k: v.flatten(0, 1) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        hidden_states = self.pooler in ("avg_top2", "avg_first_last", "avg_emb_last")
        outputs = self.encoder(**flat, output_hidden_states=hidden_states)
        pooled = pool(outputs, flat["attention_mask"], self.pooler)
        return pooled, self.projector(pooled)

    def contrastive_loss(self, projected: torch.Tensor, views: int) -> torch.Tensor:
        z = projected.view(-1, views, projected.shape[-1])
        z3 = z[:, 2] if views == 3 else None
        return info_nce(z[:, 0], z[:, 1], self.temp, z3, self.hard_negative_weight)

    def forward(self, batch: dict) -> dict:
        views = batch["input_ids"].shape[1]
        if views not in (2, 3):
            raise ValueError(f"SimCSE needs 2 views (unsupervised) or 3 (anchor, positive, hard negative); got {views}")
        _, projected = self.encode_views(batch)
        loss = self.contrastive_loss(projected, views)
        return {"loss": loss, "contrastive": loss.detach()}
