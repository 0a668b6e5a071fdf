"""DiffAug's semi-supervised training strategies (Wang & Lu 2022, Appendix C, Table 6), one setting for any method
(its training sentence vector, `Objective.embed`, is what the NLI head reads); DiffAug has its own.

- `joint`: L_cl on the method's own data (Wiki1M) + α · L_ce on NLI (Eq. 13), from the start;
- `sup-unsup`: L_ce on NLI for `stage1_steps`, then the method's L_cl alone;
- `sup-joint`: L_ce on NLI for `stage1_steps`, then L_joint.

L_ce is DiffAug's stage-1 head: softmax cross-entropy of a Linear(3h, 2) on [u; v; |u - v|] of NLI triplets,
(anchor, entailment) -> 1 and (anchor, contradiction) -> 0 (DiffAug models.py:314-325). The supervised stage trains
the encoder with the head, as ConSERT's `sup-sbert` run does before the contrastive run continues from it
(ConSERT scripts/sup-sbert-base.sh, then sup-consert-sup-unsup-base.sh with --continue_training): so stage 1 trains
every parameter at `stage1_lr`, with its own linear schedule over its own steps (two runs there), and the second
stage starts a fresh optimizer at `lr`, as a continued run does."""

from __future__ import annotations

import torch
from torch import nn

from .contrastive import init_like_official
from .objective import Objective

STRATEGIES = ("none", "joint", "sup-unsup", "sup-joint")


def nli_cross_entropy(classifier: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of `classifier` on [u; v; |u - v|] of (rows, 3, hidden) triplets: (anchor, entailment) -> 1,
    (anchor, contradiction) -> 0 (DiffAug models.py:314-325)."""
    u, v, w = z[:, 0], z[:, 1], z[:, 2]
    features = torch.cat([torch.cat([u, v, (u - v).abs()], 1), torch.cat([u, w, (u - w).abs()], 1)])
    labels = (torch.arange(2 * len(u), device=z.device) < len(u)).long()  # made on the device: no copy to wait for
    return nn.functional.cross_entropy(classifier(features).float(), labels)


class SemiSupervised(Objective):
    """`inner` (a method's objective) trained under one of the strategies, on the vector the method trains
    (`inner.embed`). The exported model, its test and dev readings are the inner method's; the head is
    training-only. Batches carry the NLI triplets as `nli_input_ids` / `nli_attention_mask` (the loop adds them in
    stage 1 and, with α > 0, to every main-stage batch)."""

    #: a supervised stage first (sup-unsup, sup-joint; joint trains no steps in it)
    two_stages = True
    #: the first stage is a run of its own (sup-sbert): its schedule decays over its own steps
    stage1_own_schedule = True

    def __init__(self, inner: Objective, strategy: str, alpha: float = 0.0):
        if strategy not in STRATEGIES[1:]:
            raise ValueError(f"unknown semi_strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}")
        # the inner method's encoder and pooler; its training vector is the inner method's (`embed`)
        super().__init__(inner.encoder, pooler=inner.pooler, projector=None, temp=inner.temp,
                         tokenizer=inner.tokenizer)
        self.inner, self.strategy, self.alpha = inner, strategy, alpha
        config = inner.encoder.config
        self.classifier = init_like_official(nn.Linear(3 * config.hidden_size, 2),
                                             getattr(config, "initializer_range", 0.02))

    @property
    def method(self) -> str:
        return self.inner.method

    def stage1_state(self) -> dict[str, torch.Tensor]:
        """The head after the supervised stage (the encoder's state is in the checkpoints)."""
        return {f"classifier.{k}": v.detach().float().cpu().contiguous()
                for k, v in self.classifier.state_dict().items()}

    def nli_loss(self, batch: dict) -> torch.Tensor:
        return nli_cross_entropy(self.classifier, self.embed({"input_ids": batch["nli_input_ids"],
                                                              "attention_mask": batch["nli_attention_mask"]}))

    def embed(self, batch: dict) -> torch.Tensor:
        return self.inner.embed(batch)

    def host_inputs(self, batch: dict) -> dict:
        return self.inner.host_inputs(batch)

    def compiled_modules(self) -> list[nn.Module]:
        return self.inner.compiled_modules()

    def forward(self, batch: dict) -> dict:
        if self.stage == 1:
            loss = self.nli_loss(batch)
            return {"loss": loss, "nli": loss.detach()}
        out = self.inner(batch)
        if not self.alpha:
            return out
        aux = self.nli_loss(batch)
        return {**out, "loss": out["loss"] + self.alpha * aux, "nli": aux.detach()}

    # --- gradient caching of the main stage (cse_kit.methods.grad_cache): the inner method's streams, and with
    # α > 0 the NLI triplets as a stream of their own, the head on the whole batch ---

    def cache_refusal(self) -> str | None:
        return self.inner.cache_refusal()

    def cache_inputs(self, batch: dict) -> dict:
        inputs = self.inner.cache_inputs(batch)
        if self.alpha:
            inputs["nli"] = {"input_ids": batch["nli_input_ids"], "attention_mask": batch["nli_attention_mask"]}
        return inputs

    def cache_encode(self, stream: str, inputs) -> torch.Tensor:
        if stream == "nli":
            return self.embed(inputs)
        return self.inner.cache_encode(stream, inputs)

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        loss, out = self.inner.cache_loss(inputs, reps, backward, chunk)
        if not self.alpha:
            return loss, out
        aux = nli_cross_entropy(self.classifier, reps["nli"])
        return loss + self.alpha * aux, {**out, "loss": out["loss"] + self.alpha * aux, "nli": aux.detach()}

    # --- the inner method's test model and readings ---

    def test_model(self):
        return self.inner.test_model()

    @property
    def test_pooler(self) -> str:
        return self.inner.test_pooler

    def test_reading(self):
        return self.inner.test_reading()

    @property
    def dev_pooler(self) -> str:
        return self.inner.dev_pooler

    def dev_reading(self):
        return self.inner.dev_reading()

    @property
    def test_max_length(self) -> int | None:
        return self.inner.test_max_length
