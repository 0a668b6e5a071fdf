"""SimCSE (Gao et al. 2021): unsupervised (two dropout views of each sentence) and supervised (NLI triplets with
hard negatives). The projector is training-only; the exported model is the bare encoder."""

from __future__ import annotations

import torch
from torch import nn

from .contrastive import official_share
from .objective import Objective
from .registry import register


@register("simcse")
class SimCSE(Objective):
    """Batch: input_ids / attention_mask (/ token_type_ids) of shape (batch, views, length): 2 views (the same
    sentence twice) for unsupervised SimCSE, 3 (anchor, entailment, contradiction) for supervised. The training
    vector is the base's (the pooled output through the projector); what is SimCSE's own is InfoNCE with the third
    view as hard negatives (`loss`), and supervised SimCSE's MLP kept as the exported model's pooler layer.

    Its settings stay TrainConfig fields, not an Options dataclass: temp, pooler and projector are every method's
    (the base's), and hard_negative_weight, keep_projector, simcse_variant and official_processes are fields in
    every run's key (cse_kit.results.identity hashes TrainConfig.to_dict()), whatever its method, so moving them
    into Options would re-key every record of every store; PromptBERT and DiffAug read two of them too."""

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

    def loss(self, z: torch.Tensor) -> dict:
        """InfoNCE of the first two views, a third (NLI's contradiction) as hard negatives; the step's gradient
        that of an official run on `official_processes` processes (official_share)."""
        views = z.shape[1]
        if views not in (2, 3):
            raise ValueError(f"SimCSE needs 2 views (unsupervised) or 3 (anchor, positive, hard negative); got {views}")
        loss = self.info_nce(z[:, 0], z[:, 1], z[:, 2] if views == 3 else None,
                             hard_negative_weight=self.hard_negative_weight)
        return {"loss": official_share(loss, self.official_processes), "contrastive": loss}

    # --- for the methods built on SimCSE's InfoNCE (DiffCSE, ESimCSE) ---

    def encode_views(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(pooled, projected), both (batch * views, hidden); the projector sees all views at once (as the official
        code)."""
        pooled = self.pooled(batch).flatten(0, 1)
        return pooled, self.projector(pooled)

    def contrastive_loss(self, projected: torch.Tensor, views: int) -> torch.Tensor:
        """SimCSE's InfoNCE of (batch * views, hidden) training vectors (SimCSE's own, whatever loss a subclass
        writes): the term DiffCSE adds its task to."""
        return SimCSE.loss(self, projected.view(-1, views, projected.shape[-1]))["contrastive"]
