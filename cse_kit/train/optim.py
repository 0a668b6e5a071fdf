"""The optimizers a run steps with: torch's AdamW (the kit's protocol, every `paper` variant) or the one the official
code stepped with, `transformers.optimization.AdamW` as two trainers built it.

That legacy AdamW (transformers 2.x-4.x, removed later) adds eps to sqrt(v) before the bias correction,
    p -= lr · sqrt(1 - b2^t) / (1 - b1^t) · m / (sqrt(v) + eps)          (correct_bias=True)
    p -= lr · m / (sqrt(v) + eps)                                          (correct_bias=False)
and decays the weights after the update, p -= lr · wd · p (transformers-4.2.1 optimization.py:338-366, vendored in
voidism/DiffCSE). torch's AdamW adds eps to the bias-corrected sqrt(v / (1 - b2^t)) and decays before the update. For
ordinary gradients the two agree closely; where sqrt(v) is near eps (small gradients: fp16 clipping, the first steps)
the legacy step is smaller, by up to sqrt(1 - b2) = 0.03 at t = 1."""

from __future__ import annotations

import contextlib
import math

import torch

#: optimizer -> what it is. Weight decay: the optimizer's own default unless the run sets weight_decay, on the
#: parameters each official builder decayed (LEGACY's no-decay names).
OPTIMIZERS = {
    "torch-adamw": "torch.optim.AdamW, eps 1e-8 added to the bias-corrected sqrt(v), weight decay 0 on every "
                   "parameter (the kit's protocol)",
    "hf-trainer": "transformers.optimization.AdamW as the Hugging Face Trainer builds it (transformers 4.2-4.15 "
                  "Trainer.create_optimizer_and_scheduler): eps 1e-8 added to sqrt(v) before the bias correction, "
                  "betas (0.9, 0.999), weight decay 0 (TrainingArguments' defaults) on all but biases and LayerNorm "
                  "weights",
    "diffaug-trainer": "transformers.optimization.AdamW as DiffAug's trainer builds each of its two optimizers "
                       "(TianduoWang/DiffAug diffaug/trainers.py:247-260, 264-276): the Hugging Face Trainer's "
                       "arguments, every parameter in one group decayed by weight_decay (0 by default)",
    "sentence-transformers": "transformers.AdamW as SentenceTransformer.fit builds it (yym6472/ConSERT "
                             "sentence_transformers/SentenceTransformer.py:459-461, 531-539; main.py:291): no bias "
                             "correction, eps 1e-6, weight decay 0.01 but on biases and LayerNorm weights",
}
#: optimizer -> (eps, correct_bias, default weight decay, the name parts of its undecayed parameters); None for
#: torch's. The Trainer's no_decay ["bias", "LayerNorm.weight"] (trainer.py:553 of 4.2.1, the SimCSE, DiffCSE,
#: ESimCSE and Prompt-BERT runs); SCD's 4.10 Trainer leaves out every parameter of an nn.LayerNorm and every bias,
#: the same parameters in every encoder the kit trains (tested); fit's ['bias', 'LayerNorm.bias',
#: 'LayerNorm.weight'] (:533); DiffAug's trainer none (one decayed group)
LEGACY = {"hf-trainer": (1e-8, True, 0.0, ("bias", "LayerNorm.weight")),
          "diffaug-trainer": (1e-8, True, 0.0, ()),
          "sentence-transformers": (1e-6, False, 0.01, ("bias", "LayerNorm.bias", "LayerNorm.weight"))}


class LegacyAdamW(torch.optim.Optimizer):
    """transformers.optimization.AdamW (see the module docstring), its state per parameter as there (`step`, an
    int, counts the steps the parameter had a gradient). One _foreach kernel per operation and group."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                 correct_bias: bool = True):
        if lr < 0 or eps < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"LegacyAdamW needs lr >= 0, eps >= 0 and betas in [0, 1); got {lr}, {eps}, {betas}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "correct_bias": correct_bias})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            states = [self.state[p] for p in params]
            for p, state in zip(params, states):
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
            grads = [p.grad for p in params]
            exp_avg, exp_avg_sq = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
            torch._foreach_mul_(exp_avg, beta1)
            torch._foreach_add_(exp_avg, grads, alpha=1 - beta1)
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_add_(denom, group["eps"])
            steps = [-group["lr"] * (math.sqrt(1 - beta2 ** s["step"]) / (1 - beta1 ** s["step"])
                                     if group["correct_bias"] else 1.0) for s in states]
            torch._foreach_addcdiv_(params, exp_avg, denom, steps)
            if group["weight_decay"] > 0:  # after the update, on the updated weights (the legacy order)
                torch._foreach_add_(params, params, alpha=-group["lr"] * group["weight_decay"])
        return loss


def check_optimizer(name: str) -> str:
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
    return name


def default_weight_decay(name: str) -> float:
    """The weight decay the optimizer is built with unless a run sets one."""
    return LEGACY[check_optimizer(name)][2] if name in LEGACY else 0.0


@contextlib.contextmanager
def gradients_only_for(needed, trained):
    """Within it, autograd computes gradients for `needed` only, of the parameters in `trained`: the others stop
    requiring grad, then require it again. A stage that steps and clips a subset (DiffAug's stage 1 of the paper
    variant: its prefixes and classifier) thus skips the weight gradients of the encoder its other stage trains,
    about a third of the stage's backward, while the gradients it uses are the same (a weight's gradient is never
    an input to another's)."""
    keep = {id(p) for p in needed}
    paused = [p for p in trained if id(p) not in keep and p.requires_grad]
    for p in paused:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in paused:
            p.requires_grad_(True)


def stage_gradients(objective, stage: int, trained):
    """What a step of `stage` computes gradients for: stage 1 of a two-stage objective only the parameters it steps
    and clips (gradients_only_for: the paper's DiffAug, its prefixes and classifier), any other step all of
    `trained`."""
    if stage != 1:
        return contextlib.nullcontext()
    return gradients_only_for([*objective.clipped_parameters(), *objective.stage1_parameters()], trained)


def fused_update(device_type: str, precision: str) -> bool:
    """Whether torch-adamw updates every parameter in one fused kernel: on CUDA, and for a bf16 run on a CPU (5.8x
    faster than _foreach there at BERT-base's shapes, idle: bench/adamw_step.py). An fp32 run on a CPU keeps
    _foreach, bit-identical to torch's default per-parameter loop and so to the kit's earlier fp32 numbers; the fused
    kernel rounds otherwise (2.2e-8 apart after six steps), which is nothing beside bf16's own rounding. Both are
    deterministic, so either resumes bit-exactly."""
    return device_type == "cuda" or precision == "bf16"


def build_optimizer(named_parameters, name: str, lr: float, weight_decay: float | None = None,
                    fused: bool = False) -> torch.optim.Optimizer:
    """The optimizer `name` over (name, parameter) pairs. torch-adamw: one group, as the kit always built it (fused
    where fused_update says; elsewhere one _foreach kernel per operation, bit-identical to torch's default
    per-parameter loop on CPU: docs/training.md, "Precision"); the legacy ones: the group their official builder
    decayed and, where it had one, the group it did not (LEGACY), each group carrying `decay` so that a resumed run
    with another weight decay sets it on the decayed group only."""
    check_optimizer(name)
    weight_decay = default_weight_decay(name) if weight_decay is None else weight_decay
    named = list(named_parameters)
    if name == "torch-adamw":
        return torch.optim.AdamW([p for _, p in named], lr=lr, weight_decay=weight_decay, fused=fused,
                                 foreach=not fused)
    eps, correct_bias, _, no_decay = LEGACY[name]
    undecayed = [any(part in n for part in no_decay) for n, _ in named]
    groups = [{"params": [p for (_, p), no in zip(named, undecayed) if no == skip], "decay": not skip,
               "weight_decay": 0.0 if skip else weight_decay} for skip in (False, True)]
    return LegacyAdamW([g for g in groups if g["params"]], lr=lr, eps=eps, correct_bias=correct_bias)


def set_weight_decay(optimizer: torch.optim.Optimizer, weight_decay: float) -> None:
    """A resumed run's new weight decay, on the groups that decay."""
    for group in optimizer.param_groups:
        group["weight_decay"] = weight_decay if group.get("decay", True) else 0.0
