"""DiffCSE (Chuang et al. 2022): SimCSE plus conditional replaced-token detection. A frozen masked-LM generator
edits the sentence; a discriminator, initialised from the encoder's checkpoint, sees the edited sentence with the
sentence vector h in place of its position-0 input embedding and predicts which tokens were replaced; its
gradient reaches the encoder through h. Only the encoder (with the projector) is exported."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from .simcse import SimCSE

#: Where the paper's text and the official code (voidism/DiffCSE) differ; the official behaviour is the default.
VARIANTS = {
    "official-code": {"generator_output": "argmax", "generator_dropout": True, "rtd_reduction": "mean",
                      "condition": "projector"},
    "paper-text": {"generator_output": "sample", "generator_dropout": False, "rtd_reduction": "sum",
                   "condition": "projector"},
}
#: generator rows projected onto the vocabulary at once (250 MB of float32 logits for a 30k vocabulary)
GENERATOR_CHUNK = 2048

CHOICES = {
    "generator_output": {"argmax": "the generator's argmax at every non-padding position (official code)",
                         "sample": "a sample from the generator at the masked positions only (paper, ELECTRA)"},
    "rtd_reduction": {"mean": "cross-entropy mean over every position of the batch, padding included (official)",
                      "sum": "sum over the real tokens of every sentence (the paper's formula)"},
    "condition": {"projector": "h is the projector output (official code)",
                  "encoder": "h is the pooled encoder output before the projector (official --before_mlp)"},
}


def special_token_ids(tokenizer) -> torch.Tensor:
    """Ids MLM corruption never selects ([CLS], [SEP], [PAD], ...)."""
    return torch.tensor(sorted(set(tokenizer.all_special_ids)))


def mlm_corrupt(input_ids: torch.Tensor, special: torch.Tensor, ratio: float, mask_id: int, vocab_size: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's MLM corruption as the official collator: each non-special token is selected with probability
    `ratio`; of those 80% become [MASK], 10% a random token, 10% stay. Returns (corrupted ids, selected)."""
    def coin(p, like):
        return torch.rand(like.shape, device=like.device, generator=generator) < p

    selected = coin(ratio, input_ids) & ~special
    masked = selected & coin(0.8, input_ids)
    randomized = selected & ~masked & coin(0.5, input_ids)
    out = input_ids.masked_fill(masked, mask_id)
    random_ids = torch.randint(vocab_size, input_ids.shape, device=input_ids.device, generator=generator)
    return torch.where(randomized, random_ids, out), selected


def generator_head_input(generator: nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """What a masked LM's output embedding (its vocabulary projection) receives, shape (batch, length, dim).
    The projection itself is skipped here: a pre-hook hands it an empty slice, so no (batch, length, vocab)
    tensor is ever built."""
    captured = {}

    def capture(module, args):
        captured["hidden"] = args[0]
        return (args[0][..., :0, :],)

    handle = generator.get_output_embeddings().register_forward_pre_hook(capture)
    try:
        generator(input_ids=ids, attention_mask=attention_mask)
    finally:
        handle.remove()
    return captured["hidden"]


class DiffCSE(SimCSE):
    method = "diffcse"

    def __init__(self, encoder: nn.Module, generator: nn.Module, tokenizer, *, mask_ratio: float = 0.30,
                 lam: float = 0.005, generator_output: str = "argmax", generator_dropout: bool = True,
                 rtd_reduction: str = "mean", condition: str = "projector", discriminator: nn.Module | None = None,
                 **simcse_kwargs):
        super().__init__(encoder, **simcse_kwargs)
        if not 0 < mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
        if lam < 0:
            raise ValueError(f"lambda (the RTD weight) must be >= 0, got {lam}")
        for name, value in (("generator_output", generator_output), ("rtd_reduction", rtd_reduction),
                            ("condition", condition)):
            if value not in CHOICES[name]:
                raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(CHOICES[name])}")
        vocab = encoder.get_input_embeddings().num_embeddings
        gen_vocab = generator.get_output_embeddings().out_features
        if gen_vocab > vocab:
            raise ValueError(f"the generator predicts {gen_vocab} token ids but the encoder's vocabulary has {vocab}: "
                             "use a generator with the encoder's tokenizer (DistilBERT for BERT, DistilRoBERTa for "
                             "RoBERTa)")
        self.mask_ratio, self.lam = mask_ratio, lam
        self.generator_output, self.generator_dropout = generator_output, generator_dropout
        self.rtd_reduction, self.condition = rtd_reduction, condition
        self.generator = generator.requires_grad_(False)
        # the official code loads the discriminator from the encoder's checkpoint; a copy of the freshly loaded
        # encoder is the same weights without a second download
        self.discriminator = discriminator if discriminator is not None else copy.deepcopy(encoder)
        self.rtd_head = nn.Linear(self.discriminator.config.hidden_size, 2)
        self.mask_id, self.cls_id, self.pad_id = tokenizer.mask_token_id, tokenizer.cls_token_id, tokenizer.pad_token_id
        self.register_buffer("special_ids", special_token_ids(tokenizer), persistent=False)
        self.vocab_size = gen_vocab
        self._h = None
        self.discriminator.embeddings.register_forward_hook(self._condition_on_h)

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "DiffCSE":
        from transformers import AutoModelForMaskedLM

        from ..models import load_model

        _, generator = load_model(cfg.generator, model_class=AutoModelForMaskedLM, data_dir=cfg.data_dir)
        return cls(encoder, generator, tokenizer, mask_ratio=cfg.mask_ratio, lam=cfg.lam, **cfg.diffcse_options(),
                   **cls.common_options(cfg))

    def _condition_on_h(self, module, args, output):
        """Position 0 of the discriminator's embedding output (after LayerNorm and dropout) becomes h."""
        if self._h is None:
            return output
        return torch.cat([self._h.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

    def _generator_head_input(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return generator_head_input(self.generator, ids, attention_mask)

    def _generator_choices(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generator's token at each row of `hidden` (rows, dim): argmax or a sample of its distribution.
        Chunked: the vocabulary-sized projection is the generator's largest cost, and a full
        (rows, vocab) logits tensor is hundreds of MB that are written once and read once."""
        project = self.generator.get_output_embeddings()
        choices = []
        for chunk in hidden.split(GENERATOR_CHUNK):
            logits = project(chunk)
            if self.generator_output == "argmax":
                choices.append(logits.argmax(-1))
            else:
                choices.append(torch.multinomial(logits.float().softmax(-1), 1).squeeze(1))
        return torch.cat(choices)  # split always yields a chunk, an empty one for no rows

    @torch.no_grad()
    def edit(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(edited ids x'', RTD labels = edited != original on real tokens)."""
        special = torch.isin(input_ids, self.special_ids)
        corrupted, selected = mlm_corrupt(input_ids, special, self.mask_ratio, self.mask_id, self.vocab_size)
        self.generator.train(self.training and self.generator_dropout)
        hidden = self._generator_head_input(corrupted, attention_mask)
        # the generator's choice matters only where it can enter x'': every real token after [CLS] (argmax, the
        # official code) or the corrupted tokens (sampling); position 0 is [CLS] and padding stays padding
        if self.generator_output == "argmax":
            where = attention_mask == 1
            where[:, 0] = False
        else:
            where = selected & (attention_mask == 1)
        edited = input_ids.clone()
        edited[where] = self._generator_choices(hidden[where])
        edited[:, 0] = self.cls_id
        edited = edited.masked_fill(attention_mask == 0, self.pad_id)
        return edited, (edited != input_ids) & (attention_mask == 1)

    def rtd_loss(self, h: torch.Tensor, edited: torch.Tensor, labels: torch.Tensor,
                 attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Replaced-token detection conditioned on h; returns (loss, per-token accuracy on real tokens)."""
        self._h = h
        try:
            hidden = self.discriminator(input_ids=edited, attention_mask=attention_mask).last_hidden_state
        finally:
            self._h = None
        logits = self.rtd_head(hidden).float()
        target = labels.long()
        if self.rtd_reduction == "mean":
            loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        else:
            per_token = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none")
            loss = (per_token * attention_mask.flatten()).sum()
        real = attention_mask == 1
        accuracy = (logits.argmax(-1) == target)[real].float().mean()
        return loss, accuracy

    def forward(self, batch: dict) -> dict:
        views = batch["input_ids"].shape[1]
        if views != 2:
            raise ValueError(f"DiffCSE trains on two dropout views of unlabelled sentences; got {views} views")
        pooled, projected = self.encode_views(batch)
        contrastive = self.contrastive_loss(projected, views)
        ids, mask = batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1)
        edited, labels = self.edit(ids, mask)  # each view masked independently, as the official collator
        h = projected if self.condition == "projector" else pooled
        rtd, accuracy = self.rtd_loss(h, edited, labels, mask)
        return {"loss": contrastive + self.lam * rtd, "contrastive": contrastive.detach(), "rtd": rtd.detach(),
                "rtd_accuracy": accuracy.detach(), "replaced": labels.float()[mask == 1].mean()}
