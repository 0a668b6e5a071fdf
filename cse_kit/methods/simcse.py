"""SimCSE (Gao et al. 2021): unsupervised (two dropout views of each sentence) and supervised (NLI triplets with
hard negatives). The projector is training-only; the exported model is the bare encoder."""

from __future__ import annotations

import torch
from torch import nn

from .contrastive import info_nce, official_share
from .objective import Objective
from .registry import register


@register("simcse")
class SimCSE(Objective):
    """Batch: input_ids / attention_mask (/ token_type_ids) of shape (batch, views, length): 2 views (the same
    sentence twice) for unsupervised SimCSE, 3 (anchor, entailment, contradiction) for supervised. The training
    vector is the base's (the pooled output through the projector); what is SimCSE's own is InfoNCE with the third
    view as hard negatives, and supervised SimCSE's MLP kept as the exported model's pooler layer."""

    def __init__(self, encoder: nn.Module, *, pooler: str = "cls_before_pooler", projector: str = "mlp",
                 temp: float = 0.05, hard_negative_weight: float = 0.0, keep_projector: bool = False,
                 official_processes: int = 1):
        if temp <= 0:
            raise ValueError(f"temperature must be positive, got {temp}")
        super().__init__(encoder, pooler=pooler, projector=projector, temp=temp)
        self.hard_negative_weight = hard_negative_weight
        if keep_projector and not (projector == "mlp" and pooler == "cls_before_pooler"):
            raise ValueError("keep_projector exports the MLP as the model's pooler layer: it needs projector='mlp' "
                             "and pooler='cls_before_pooler'")
        self.keep_projector = keep_projector
        self.official_processes = official_processes  # the official run's process count (official_share)

    @staticmethod
    def common_options(cfg) -> dict:
        """What every SimCSE-based objective takes from the training configuration."""
        return {"pooler": cfg.pooler, "projector": cfg.projector, "temp": cfg.temp,
                "hard_negative_weight": cfg.hard_negative_weight, "keep_projector": cfg.keep_projector}

    @classmethod
    def variant_of(cls, cfg) -> str:
        """SimCSE's is the run's simcse_variant; a method built on it says its own in its options."""
        return cfg.method_options.get("variant", cfg.simcse_variant)

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "SimCSE":
        return cls(encoder, official_processes=cfg.official_processes, **cls.common_options(cfg))

    def test_model(self) -> tuple[nn.Module, str]:
        """(model, pooler) to evaluate and export: the bare encoder with the training pooler, or with
        `keep_projector` (supervised SimCSE) a copy whose pooler layer is the MLP (BERT's and RoBERTa's pooler is the
        same Linear + tanh on [CLS]), evaluated with pooler `cls`, as the official simcse_to_huggingface.py:21-23
        renames `mlp` to `pooler`."""
        if not self.keep_projector:
            return super().test_model()
        model = type(self.encoder)(self.encoder.config, add_pooling_layer=True)
        model.load_state_dict(self.encoder.state_dict(), strict=False)
        model.pooler.dense.load_state_dict(self.projector[0].state_dict())
        return model.to(self.encoder.device), self.test_pooler

    @property
    def test_pooler(self) -> str:
        return "cls" if self.keep_projector else self.pooler

    def encode_views(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(pooled, projected), both (batch * views, hidden); the projector sees all views at once (as the official
        code)."""
        pooled = self.pooled(batch).flatten(0, 1)
        return pooled, self.projector(pooled)

    def contrastive_loss(self, projected: torch.Tensor, views: int) -> torch.Tensor:
        z = projected.view(-1, views, projected.shape[-1])
        z3 = z[:, 2] if views == 3 else None
        return info_nce(z[:, 0], z[:, 1], self.temp, z3, self.hard_negative_weight)

    @staticmethod
    def check_views(batch: dict) -> int:
        views = batch["input_ids"].shape[1]
        if views not in (2, 3):
            raise ValueError(f"SimCSE needs 2 views (unsupervised) or 3 (anchor, positive, hard negative); got {views}")
        return views

    def forward(self, batch: dict) -> dict:
        views = self.check_views(batch)
        _, projected = self.encode_views(batch)
        loss = self.contrastive_loss(projected, views)
        return {"loss": official_share(loss, self.official_processes), "contrastive": loss.detach()}

    # --- gradient caching (cse_kit.methods.grad_cache): the encoder chunk by chunk, the projector and InfoNCE on
    # the whole batch (BatchNorm's statistics stay the batch's) ---

    def cache_inputs(self, batch: dict) -> dict:
        self.check_views(batch)
        return super().cache_inputs(batch)

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        pooled = reps["main"]
        loss = self.contrastive_loss(self.projector(pooled.flatten(0, 1)), pooled.shape[1])
        return official_share(loss, self.official_processes), {"loss": loss, "contrastive": loss.detach()}
