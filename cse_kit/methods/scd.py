"""SCD (Klein & Nabi 2022): self-contrastive decorrelation. Each sentence is encoded twice, with a low dropout rate
r_A and a high one r_B at every dropout site of the encoder (embeddings, attention probabilities, attention output,
feed-forward output). The self-contrastive term L_S, the mean cosine of the two views' sentence vectors, is
minimised (it pushes the views apart); the decorrelation term L_C, Barlow Twins on a wide projector, pulls them
together. There are no pairs across sentences. Only the encoder is exported."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..eval.encode import pooled_output
from .contrastive import gather_with_grad, init_like_official
from .objective import Objective, check_choice
from .registry import register

TERMS = {"both": "L_S + L_C (the method)", "self_contrast": "L_S only (Table 3, 'SCD (L_S)')",
         "decorrelation": "L_C only (Table 3, 'SCD (L_C)')"}
REDUCTIONS = {"mean": "L_S is the batch mean of the cosines (paper Eq. 2, official code at HEAD)",
              "sum": "L_S is their batch sum (the released checkpoints, official issue #2)"}

#: The three recipes, as config fields. Sources: paper §3.1 (both backbones); official README's BERT command
#: (`--task_alpha 1 --task_beta 0.005225 --task_lambda 0.012 --temp 0.05 --hidden_dropout_prob 0.05
#: --hidden_dropout_prob_noise 0.155`); official issue #2 (the released checkpoints: `.sum()` in L_S, task_beta
#: 1.05, the README's other values). The README gives no RoBERTa command, so official recipes are BERT's only.
VARIANTS = {
    "paper": {
        "bert": {"scd_dropout_low": 0.05, "scd_dropout_high": 0.15, "scd_self_contrast_weight": 1.0,
                 "scd_decorrelation_weight": 0.005, "scd_lambda": 0.013, "scd_temp": 1.0, "scd_reduction": "mean"},
        "roberta": {"scd_dropout_low": 0.065, "scd_dropout_high": 0.24, "scd_self_contrast_weight": 1.0,
                    "scd_decorrelation_weight": 0.0033, "scd_lambda": 0.028, "scd_temp": 1.0,
                    "scd_reduction": "mean"},
    },
    "official-code": {
        "bert": {"scd_dropout_low": 0.05, "scd_dropout_high": 0.155, "scd_self_contrast_weight": 1.0,
                 "scd_decorrelation_weight": 0.005225, "scd_lambda": 0.012, "scd_temp": 0.05,
                 "scd_reduction": "mean"},
    },
    "released-checkpoints": {
        "bert": {"scd_dropout_low": 0.05, "scd_dropout_high": 0.155, "scd_self_contrast_weight": 1.0,
                 "scd_decorrelation_weight": 1.05, "scd_lambda": 0.012, "scd_temp": 0.05, "scd_reduction": "sum"},
    },
}


def parse_widths(spec: str) -> list[int]:
    """'4096-4096-4096' (the official --projector format) -> [4096, 4096, 4096]."""
    try:
        widths = [int(w) for w in spec.split("-")]
    except ValueError:
        widths = []
    if not widths or min(widths) < 1:
        raise ValueError(f"projector widths must be positive integers joined by '-' (e.g. 4096-4096-4096), "
                         f"got {spec!r}")
    return widths


class SCDProjector(nn.Sequential):
    """The paper's projector p: Linear(d, w1) -> BN -> ReLU -> Linear(w1, w2, no bias) -> BN -> ReLU ->
    Linear(w2, w3, no bias) for widths '4096-4096-4096' (the first Linear has a bias, as the official cl_init)."""

    def __init__(self, hidden: int, widths: list[int]):
        sizes = [hidden, *widths]
        layers = []
        for i in range(len(sizes) - 2):
            layers += [nn.Linear(sizes[i], sizes[i + 1], bias=i == 0), nn.BatchNorm1d(sizes[i + 1]), nn.ReLU()]
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=len(sizes) == 2))
        super().__init__(*layers)


def dropout_sites(encoder: nn.Module) -> list[nn.Dropout]:
    """Every nn.Dropout of the encoder. In transformers 5, BERT/RoBERTa's embedding, attention-output and
    feed-forward dropouts run these modules, and the self-attention reads its module's `.p` at each forward and
    hands it to the attention kernel (SDPA's dropout_p, or the eager path's functional dropout): setting `.p`
    reaches all four sites. A model that keeps a dropout rate as a plain number is refused, as it would keep its
    own rate in both views."""
    for name, module in encoder.named_modules():
        for attr, value in vars(module).items():
            if "dropout" in attr and isinstance(value, float):
                raise ValueError(f"{type(encoder).__name__} keeps a dropout rate as a number ({name or 'model'}."
                                 f"{attr}), which SCD cannot set per view; use a BERT or RoBERTa encoder")
    sites = [m for m in encoder.modules() if isinstance(m, nn.Dropout)]
    if not sites:
        raise ValueError(f"{type(encoder).__name__} has no nn.Dropout module: SCD's two views need dropout")
    return sites


@contextlib.contextmanager
def dropout_rate(sites: list[nn.Dropout], rate: float):
    """Every site at `rate` inside the block, their own rates again after it."""
    before = [m.p for m in sites]
    for m in sites:
        m.p = rate
    try:
        yield
    finally:
        for m, p in zip(sites, before):
            m.p = p


def off_diagonal(c: torch.Tensor) -> torch.Tensor:
    return c[~torch.eye(len(c), dtype=torch.bool, device=c.device)]


@register("scd")
class SCD(Objective):
    """Batch: input_ids / attention_mask (/ token_type_ids) of shape (batch, views, length); the views are the same
    sentence (the data layer duplicates it), and view 0 is encoded once at each rate. SCD's own: the two dropout
    rates, its wide projector (the decorrelation term's, in place of a training projector) and its two terms."""

    @dataclass
    class Options:
        """SCD's settings (defaults: the paper's BERT recipe; the official recipes are presets, VARIANTS)."""

        dropout_low: float = 0.05  # r_A at every dropout site of view A (official hidden_dropout_prob)
        dropout_high: float = 0.15  # r_B of view B (official hidden_dropout_prob_noise)
        terms: str = "both"  # both | self_contrast | decorrelation: the loss terms used (Table 3)
        self_contrast_weight: float = 1.0  # weight of L_S (official task_alpha; the paper has none, i.e. 1)
        decorrelation_weight: float = 0.005  # weight of L_C (paper α, official task_beta)
        lambda_weight: float = 0.013  # weight of the off-diagonal sum in L_C (paper λ, official task_lambda)
        temp: float = 1.0  # L_S averages cos / temp: 1 in the paper, 0.05 in the official code
        reduction: str = "mean"  # mean | sum of L_S over the batch (sum: the released checkpoints)
        projector: str = "4096-4096-4096"  # widths of the projector's three layers (official --projector)
        # paper | official-code | released-checkpoints: the recipe (the presets' values) and, off paper, the
        # official code's optimizer
        variant: str = "paper"

        def __post_init__(self):
            if not 0 <= self.dropout_low <= self.dropout_high < 1:
                raise ValueError("SCD's dropout rates need 0 <= dropout_low <= dropout_high < 1, got "
                                 f"{self.dropout_low} and {self.dropout_high}")
            check_choice("terms", self.terms, TERMS)
            check_choice("reduction", self.reduction, REDUCTIONS)
            check_choice("variant", self.variant, VARIANTS)
            if min(self.self_contrast_weight, self.decorrelation_weight, self.lambda_weight) < 0:
                raise ValueError("self_contrast_weight, decorrelation_weight and lambda_weight must be >= 0")
            if self.temp <= 0:
                raise ValueError(f"SCD's temp must be positive, got {self.temp}")
            parse_widths(self.projector)

    former_names = {**{f"scd_{name}": name for name in ("dropout_low", "dropout_high", "terms", "self_contrast_weight",
                                                        "decorrelation_weight", "temp", "reduction", "projector",
                                                        "variant")}, "scd_lambda": "lambda_weight"}

    @classmethod
    def check_run(cls, cfg) -> None:
        if cfg.dropout is not None:
            raise ValueError("SCD sets the dropout of each view itself: leave dropout unset and use "
                             "scd.dropout_low / scd.dropout_high")

    def __init__(self, encoder: nn.Module, *, pooler: str = "cls_before_pooler", dropout_low: float = 0.05,
                 dropout_high: float = 0.15, terms: str = "both", self_contrast_weight: float = 1.0,
                 decorrelation_weight: float = 0.005, lam: float = 0.013, temp: float = 1.0,
                 reduction: str = "mean", projector: str = "4096-4096-4096"):
        super().__init__(encoder, pooler=pooler, projector=None, temp=temp)
        if not 0 <= dropout_low <= dropout_high < 1:
            raise ValueError(f"SCD's dropout rates need 0 <= r_A <= r_B < 1, got r_A={dropout_low}, r_B={dropout_high}")
        if terms not in TERMS:
            raise ValueError(f"unknown SCD terms {terms!r}; choose one of: {', '.join(TERMS)}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown SCD reduction {reduction!r}; choose one of: {', '.join(REDUCTIONS)}")
        if min(self_contrast_weight, decorrelation_weight, lam) < 0 or temp <= 0:
            raise ValueError("SCD's loss weights and lambda must be >= 0 and its temperature > 0")
        self.sites = dropout_sites(encoder)
        self.rates = (dropout_low, dropout_high)
        self.terms, self.reduction = terms, reduction
        self.self_contrast_weight, self.decorrelation_weight = self_contrast_weight, decorrelation_weight
        self.lam = lam
        widths = parse_widths(projector)
        if terms != "self_contrast":  # without L_C the projector would be a parameter without gradient (DDP refuses)
            # the official cl_init builds the projector, then init_weights() (scd/models.py:110-135, 379)
            self.projector = init_like_official(SCDProjector(encoder.config.hidden_size, widths),
                                                getattr(encoder.config, "initializer_range", 0.02))
            self.bn = nn.BatchNorm1d(widths[-1], affine=False)

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "SCD":
        options = cls.options_of(cfg)
        return cls(encoder, pooler=cfg.pooler, dropout_low=options.dropout_low, dropout_high=options.dropout_high,
                   terms=options.terms, self_contrast_weight=options.self_contrast_weight,
                   decorrelation_weight=options.decorrelation_weight, lam=options.lambda_weight, temp=options.temp,
                   reduction=options.reduction, projector=options.projector)

    def encode(self, inputs: dict, rate: float) -> torch.Tensor:
        """Pooled sentence vectors of one encoder pass with every dropout site at `rate`."""
        with dropout_rate(self.sites, rate):
            return pooled_output(self.encoder, self.pooler, **inputs)

    def embed(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): each view's training vector, h at the low rate r_A (the vector both terms read;
        SCD's projector serves the decorrelation term alone)."""
        with dropout_rate(self.sites, self.rates[0]):
            return self.pooled(batch)

    def cross_correlation(self, h_a: torch.Tensor, h_b: torch.Tensor) -> torch.Tensor:
        """c = BN(p(h_A))ᵀ BN(p(h_B)) / N. Each view goes through the projector on its own (its own BatchNorm
        statistics, as the official code); the product is taken in float32, outside autocast."""
        z_a, z_b = self.bn(self.projector(h_a)), self.bn(self.projector(h_b))
        with torch.autocast(z_a.device.type, enabled=False):
            return z_a.float().T @ z_b.float() / len(z_a)

    def losses(self, h_a: torch.Tensor, h_b: torch.Tensor) -> dict:
        """The loss of this process's views, computed on every process's rows (gathered with gradient), so N
        processes compute the loss, the BatchNorm statistics and the gradient of one process on the global batch."""
        h_a, h_b = gather_with_grad(h_a), gather_with_grad(h_b)
        cosine = F.cosine_similarity(h_a.float(), h_b.float(), dim=-1)
        out = {"cosine": cosine.mean().detach()}
        loss = 0.0
        if self.terms != "decorrelation":
            scaled = cosine / self.temp
            self_contrast = scaled.mean() if self.reduction == "mean" else scaled.sum()
            loss = loss + self.self_contrast_weight * self_contrast
            out["self_contrast"] = self_contrast.detach()
        if self.terms != "self_contrast":
            c = self.cross_correlation(h_a, h_b)
            on_diagonal = (1 - torch.diagonal(c)).pow(2).sum()
            off = off_diagonal(c).pow(2).sum()
            decorrelation = on_diagonal + self.lam * off
            loss = loss + self.decorrelation_weight * decorrelation
            out.update(decorrelation=decorrelation.detach(), on_diagonal=on_diagonal.detach(),
                       off_diagonal=off.detach())
        return {"loss": loss, **out}

    @staticmethod
    def sentences(batch: dict) -> dict:
        """The batch's sentences (view 0), which each rate encodes."""
        views = batch["input_ids"].shape[1]
        if views != 2:
            raise ValueError(f"SCD trains on unlabelled sentences (two views of each); got {views} views: NLI "
                             "triplets are not supported (the official code refuses them too)")
        return {k: v[:, 0] for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}

    def forward(self, batch: dict) -> dict:
        inputs = self.sentences(batch)
        h_a, h_b = (self.encode(inputs, rate) for rate in self.rates)
        return self.losses(h_a, h_b)

    # --- gradient caching (cse_kit.methods.grad_cache): both rates' passes chunk by chunk, the projector's
    # BatchNorm and both terms on the whole batch ---

    def cache_inputs(self, batch: dict) -> dict:
        return {"main": self.sentences(batch)}

    def cache_encode(self, stream: str, inputs: dict) -> torch.Tensor:
        return torch.stack([self.encode(inputs, rate) for rate in self.rates], 1)

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        out = self.losses(reps["main"][:, 0], reps["main"][:, 1])
        return out["loss"], out
