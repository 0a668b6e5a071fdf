"""DiffCSE (Chuang et al. 2022): SimCSE plus conditional replaced-token detection. A frozen masked-LM generator
edits the sentence; a discriminator, initialised from the encoder's checkpoint, sees the edited sentence with the
sentence vector h in place of its position-0 input embedding and predicts which tokens were replaced; its
gradient reaches the encoder through h. Only the encoder (with the projector) is exported."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .grad_cache import chunks
from .heads import COPY_WEIGHT, ConditionalLMHead, corrective_lm_loss, generator_head_input
from .edits import delete_tokens, insert_masks, pad_rows, unpad
from ..data.registry import ORDERED_CORPORA
from .masking import mlm_corrupt, special_token_ids
from .objective import check_choice, variant_choices
from .registry import register
from .simcse import SimCSE

#: Where the paper's text and the official code (voidism/DiffCSE) differ; the official behaviour is the default.
VARIANTS = {
    "official-code": {"generator_output": "argmax", "generator_dropout": True, "rtd_reduction": "mean",
                      "condition": "projector", "edited_padding": "zero", "edit_views": "both", "masking": "bert"},
    "paper-text": {"generator_output": "sample", "generator_dropout": False, "rtd_reduction": "sum",
                   "condition": "projector", "edited_padding": "pad", "edit_views": "first", "masking": "mask"},
}
#: generator rows projected onto the vocabulary at once (250 MB of float32 logits for a 30k vocabulary)
GENERATOR_CHUNK = 2048

CHOICES = {
    "generator_output": {"argmax": "the generator's argmax at every non-padding position (official code)",
                         "sample": "a sample from the generator at the masked positions only (paper, ELECTRA)"},
    "rtd_reduction": {"mean": "cross-entropy mean over every position of the batch, padding included (official)",
                      "sum": "sum over the real tokens of every edited sentence (the paper's formula)"},
    "condition": {"projector": "h is the projector output (official code)",
                  "encoder": "h is the pooled encoder output before the projector (official --before_mlp; with the "
                             "BatchNorm projector an extension: the official code crashes there, diffcse/models.py:"
                             "204-206 apply BatchNorm1d to the (batch, views, hidden) tensor)"},
    "edited_padding": {"zero": "id 0 at the padding of the edited sentence, as the official `e_inputs = g_pred * "
                               "attention_mask` (diffcse/models.py:187): BERT's [PAD], but RoBERTa's <s>",
                       "pad": "the tokenizer's pad id (the same for BERT; for RoBERTa the position ids then stop "
                              "at the sentence's end)"},
    "edit_views": {"both": "each dropout view gets its own edited copy, conditioned on its own h (official code)",
                   "first": "one edited copy per sentence, conditioned on the first view's h (the paper's "
                            "L_RTD = sum over the N sentences)"},
    "masking": {"bert": "BERT's corruption of the selected tokens: 80% [MASK], 10% random, 10% kept (official "
                        "collator, train.py:533-542)",
                "mask": "every selected token becomes [MASK] (the paper's x' = m · x)"},
}

#: The objective ablations of the paper (Tables 3, 4 and 15); none is in the official code.
ABLATIONS = {
    "task": {"rtd": "replaced-token detection conditioned on h (DiffCSE)",
             "cmlm": "conditional MLM (Yang et al. 2020): recover the masked tokens of x' conditioned on h",
             "corrective": "conditional corrective LM (COCO-LM, Meng et al. 2021 §3.2): a copy head detects at every "
                           "position of x'' whether the token is the original; at the masked positions the original "
                           "token is recovered through the copy mechanism (vocabulary softmax mixed with the stopped "
                           "copy probability), conditioned on h",
             "positive": "no discriminator: the edited sentence is an extra positive in SimCSE (Table 15)",
             "negative": "no discriminator: the edited sentence is an extra negative in SimCSE (Table 15)"},
    "edit": {"replace": "MLM replacement by the generator (DiffCSE)",
             "insert": "[MASK]s inserted at random positions (mask_ratio of the tokens), filled by the generator; "
                       "label: inserted vs original",
             "delete": "mask_ratio of the tokens deleted; label per token: was the token right before it deleted",
             "all": "each sentence gets one of replace, insert, delete, uniformly at random"},
    "target": {"same": "the task edits the sentence itself (DiffCSE)",
               "next": "the task edits the next sentence of the corpus, conditioned on h of the sentence",
               "same+next": "both, their losses summed"},
}

@register("diffcse")
class DiffCSE(SimCSE):
    @dataclass
    class Options:
        """DiffCSE's settings (defaults: the official code's, voidism/DiffCSE run_diffcse.sh)."""

        lambda_weight: float = 0.005  # λ, the weight of the RTD loss (Table 8)
        mask_ratio: float = 0.30  # the generator's masking ratio (Table 7)
        generator: str = "distilbert-base-uncased"  # the frozen masked LM that edits the sentence
        variant: str = "official-code"  # official-code | paper-text: the defaults of the seven choices below
        generator_output: str | None = None
        generator_dropout: bool | None = None
        rtd_reduction: str | None = None
        condition: str | None = None
        edited_padding: str | None = None
        edit_views: str | None = None
        masking: str | None = None
        # the paper's objective ablations (Tables 3, 4, 15; ABLATIONS)
        task: str = "rtd"  # rtd | cmlm | corrective | positive | negative
        edit: str = "replace"  # replace | insert | delete | all
        target: str = "same"  # same | next | same+next (next needs an ordered corpus)
        contrastive: bool = True  # False: λ·L_task only ("w/o contrastive loss")

        def __post_init__(self):
            if not 0 < self.mask_ratio < 1:
                raise ValueError(f"mask_ratio must be in (0, 1), got {self.mask_ratio}")
            if self.lambda_weight < 0:
                raise ValueError(f"lambda_weight (λ, the RTD weight) must be >= 0, got {self.lambda_weight}")
            check_choice("variant", self.variant, VARIANTS)
            for name, choices in {**CHOICES, **ABLATIONS}.items():
                check_choice(name, getattr(self, name), choices)
            check_ablation(self.task, self.edit, self.target, self.contrastive)

        def choices(self) -> dict:
            """The paper-vs-code choices (explicit settings over the variant's) and the ablation settings."""
            return {**variant_choices(self, VARIANTS),
                    **{name: getattr(self, name) for name in (*ABLATIONS, "contrastive")}}

    former_names = {"lam": "lambda_weight"}

    @classmethod
    def check_run(cls, cfg) -> None:
        target = cfg.method_options["target"]
        if target != "same" and cfg.data not in ORDERED_CORPORA:
            raise ValueError(f"target {target!r} needs the next sentence: train on an ordered corpus "
                             f"({', '.join(ORDERED_CORPORA)}), not {cfg.data!r}")

    def __init__(self, encoder: nn.Module, generator: nn.Module | None, tokenizer, *, mask_ratio: float = 0.30,
                 lam: float = 0.005, generator_output: str = "argmax", generator_dropout: bool = True,
                 rtd_reduction: str = "mean", condition: str = "projector", edited_padding: str = "zero",
                 edit_views: str = "both", masking: str = "bert", task: str = "rtd", edit: str = "replace",
                 target: str = "same", contrastive: bool = True, discriminator: nn.Module | None = None,
                 **simcse_kwargs):
        super().__init__(encoder, **simcse_kwargs)
        if not 0 < mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
        if lam < 0:
            raise ValueError(f"lambda (the RTD weight) must be >= 0, got {lam}")
        settings = {"generator_output": generator_output, "rtd_reduction": rtd_reduction, "condition": condition,
                    "edited_padding": edited_padding, "edit_views": edit_views, "masking": masking, "task": task,
                    "edit": edit, "target": target}
        for name, value in settings.items():
            choices = CHOICES.get(name) or ABLATIONS[name]
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        check_ablation(task, edit, target, contrastive)
        self.mask_ratio, self.lam = mask_ratio, lam
        self.generator_output, self.generator_dropout = generator_output, generator_dropout
        self.rtd_reduction, self.condition, self.edit_views, self.masking = rtd_reduction, condition, edit_views, masking
        self.task, self.edit_kind, self.target, self.use_contrastive = task, edit, target, contrastive
        self.mask_id, self.cls_id, self.pad_id = tokenizer.mask_token_id, tokenizer.cls_token_id, tokenizer.pad_token_id
        self.edited_pad_id = 0 if edited_padding == "zero" else self.pad_id
        self.register_buffer("special_ids", special_token_ids(tokenizer), persistent=False)
        vocab = encoder.get_input_embeddings().num_embeddings
        self.vocab_size = vocab
        self.generator = None
        if generator is not None:
            gen_vocab = generator.get_output_embeddings().out_features
            if gen_vocab > vocab:
                raise ValueError(f"the generator predicts {gen_vocab} token ids but the encoder's vocabulary has "
                                 f"{vocab}: use a generator with the encoder's tokenizer (DistilBERT for BERT, "
                                 "DistilRoBERTa for RoBERTa)")
            self.generator, self.vocab_size = generator.requires_grad_(False), gen_vocab
        elif needs_generator(task, edit):
            raise ValueError(f"task {task!r} with edit {edit!r} needs a generator (a masked LM)")
        self.discriminator = None
        self._h = None
        if task in ("rtd", "cmlm", "corrective"):
            # the official code loads the discriminator from the encoder's checkpoint; a copy of the freshly loaded
            # encoder is the same weights without a second download
            self.discriminator = discriminator if discriminator is not None else copy.deepcopy(encoder)
            self.discriminator.embeddings.register_forward_hook(self._condition_on_h)
            config = self.discriminator.config
            if task == "rtd":
                # torch's default init: the official train.py:373,387 attaches it after loading, no init_weights
                self.rtd_head = nn.Linear(config.hidden_size, 2)
            else:
                corrective = task == "corrective"
                self.lm_head = ConditionalLMHead(config, vocab, copy=corrective, transform=not corrective)

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "DiffCSE":
        from .mlm_head import load_generator

        options = cls.options_of(cfg)
        generator = None
        if needs_generator(options.task, options.edit):
            generator = load_generator(options.generator, cfg.data_dir)
        return cls(encoder, generator, tokenizer, mask_ratio=options.mask_ratio, lam=options.lambda_weight,
                   **options.choices(), **cls.common_options(cfg))

    def _condition_on_h(self, module, args, output):
        """Position 0 of the discriminator's embedding output (after LayerNorm and dropout) becomes h."""
        if self._h is None:
            return output
        return torch.cat([self._h.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

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

    def _corrupt(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        special = torch.isin(input_ids, self.special_ids)
        return mlm_corrupt(input_ids, special, self.mask_ratio, self.mask_id, self.vocab_size,
                           bert=self.masking == "bert")

    def _replace(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(x'', replaced: x'' != x on real tokens, selected: the positions the MLM corruption masked)."""
        corrupted, selected = self._corrupt(input_ids)
        hidden = generator_head_input(self.generator, corrupted, attention_mask)
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
        return edited, (edited != input_ids) & (attention_mask == 1), selected & (attention_mask == 1)

    #: the edits by their number in a drawn layout's `kinds` (`all` draws one per row)
    EDITS = ("replace", "insert", "delete")

    def draw_edits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, kind: str | None = None) -> dict:
        """What an edit draws per sentence, on the host (ids and mask on the CPU, before they move; a GPU step would
        otherwise wait for the device to read each row): each row's edit (`kinds`, the EDITS' numbers: one at random
        per row for `all`), the rows each edit takes (`replace_rows`, `insert_rows`: indices, so that whether an edit
        has rows is their shape) and the edited rows laid out (`ids`, `labels`, `mask`: insertions as [MASK]s that
        the generator fills on the device, deletions done; a replaced row keeps its ids, which replacement edits on
        the device). Drawn from the global generator: the kinds, then each row's insertion or deletion in turn."""
        kind = kind or self.edit_kind
        rows = len(input_ids)
        kinds = torch.randint(3, (rows,)) if kind == "all" else torch.full((rows,), self.EDITS.index(kind))
        laid, flags = [], []
        for row, k in zip(unpad(input_ids, attention_mask), kinds.tolist()):
            edited = (row, [False] * len(row)) if k == 0 else \
                insert_masks(row, self.mask_ratio, self.mask_id) if k == 1 else delete_tokens(row, self.mask_ratio)
            laid.append(edited[0])
            flags.append(edited[1])
        ids, labels, mask = pad_rows(laid, flags, self.pad_id)
        return {"kinds": kinds, "replace_rows": (kinds == 0).nonzero().flatten(),
                "insert_rows": (kinds == 1).nonzero().flatten(), "ids": ids, "labels": labels, "mask": mask}

    def _apply_edits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, drawn: dict
                     ) -> tuple[torch.Tensor, ...]:
        """(x'', labels, attention mask of x'') from the host's draws (draw_edits), on the device without reading
        it: the replaced rows replaced (MLM corruption and the generator), the inserted [MASK]s filled by the
        generator (argmax or a sample)."""
        ids, labels, mask = drawn["ids"].clone(), drawn["labels"].clone(), drawn["mask"]
        replaced, inserted = drawn["replace_rows"], drawn["insert_rows"]
        if len(replaced):  # a replaced row keeps its length, at most the edited rows' width
            edited, changed, _ = self._replace(input_ids[replaced], attention_mask[replaced])
            width = ids.shape[1]
            ids[replaced] = F.pad(edited[:, :width], (0, width - min(width, edited.shape[1])), value=self.pad_id)
            labels[replaced] = F.pad(changed[:, :width], (0, width - min(width, changed.shape[1])))
        if len(inserted):
            rows, where = ids[inserted], labels[inserted]
            hidden = generator_head_input(self.generator, rows, mask[inserted])
            rows[where] = self._generator_choices(hidden[where])
            ids[inserted] = rows
        return ids, labels, mask

    @torch.no_grad()
    def edit(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, kind: str | None = None,
             drawn: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(edited ids x'', labels, attention mask of x''). Labels: replace: edited != original on real tokens;
        insert: the inserted tokens; delete: the tokens whose predecessor was deleted. `drawn`: the host's draws
        (draw_edits, made by host_inputs before the batch moved); without them, replacement is drawn on the device
        and the other edits here, from the ids read back from it."""
        kind = kind or self.edit_kind
        self._generator_mode()
        if kind == "replace":
            edited, labels, _ = self._replace(input_ids, attention_mask)
            mask = attention_mask
        else:
            if drawn is None:
                drawn = {k: v.to(input_ids.device) for k, v in self.draw_edits(input_ids.cpu(), attention_mask.cpu(),
                                                                                  kind).items()}
            edited, labels, mask = self._apply_edits(input_ids, attention_mask, drawn)
        return edited.masked_fill(mask == 0, self.edited_pad_id), labels, mask

    def _edited_sentences(self, batch: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(ids, attention mask) of each group of sentences the task edits: the first view (Table 15's extra
        positive or negative), else the task's sentences (_task_sentences)."""
        if self.task in ("positive", "negative"):
            return [(batch["input_ids"][:, 0], batch["attention_mask"][:, 0])]
        return self._task_sentences(batch)

    def host_inputs(self, batch: dict) -> dict:
        """Insertion and deletion (`edit` insert, delete, all) drawn on the host for each group of sentences the task
        edits, before the batch moves (draw_edits), as `edit{group}_{name}`; replacement is drawn on the device."""
        if self.edit_kind == "replace" or self.task in ("cmlm", "corrective") or "input_ids" not in batch:
            return batch
        drawn = {f"edit{group}_{name}": value for group, (ids, mask) in enumerate(self._edited_sentences(batch))
                 for name, value in self.draw_edits(ids, mask).items()}
        return {**batch, **drawn}

    def _edits(self, batch: dict) -> list[tuple[torch.Tensor, ...]]:
        """(x'', labels, attention mask of x'') of each group of sentences the task edits, with the host's draws
        where host_inputs made them."""
        return [self.edit(ids, mask, drawn=_drawn(batch, group))
                for group, (ids, mask) in enumerate(self._edited_sentences(batch))]

    def _generator_mode(self) -> None:
        if self.generator is not None:
            self.generator.train(self.training and self.generator_dropout)

    @torch.no_grad()
    def replace_for_correction(self, input_ids: torch.Tensor, attention_mask: torch.Tensor
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The replaced sentence x'' (as `edit(..., "replace")`, same random draws) and M, the positions the MLM
        corruption masked (real tokens only): COCO-LM's L_LM covers M, its L_copy every real token."""
        self._generator_mode()
        edited, _, selected = self._replace(input_ids, attention_mask)
        return edited.masked_fill(attention_mask == 0, self.edited_pad_id), selected

    def compiled_modules(self) -> list[nn.Module]:
        """The encoder and the discriminator (its conditioning hook traced with it). Not the generator: its head's
        pre-hook is registered afresh for each pass (generator_head_input), which a compiled module would compile
        again for."""
        return [self.encoder, *([self.discriminator] if self.discriminator is not None else [])]

    def _discriminate(self, h: torch.Tensor, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        self._h = h
        try:
            return self.discriminator(input_ids=ids, attention_mask=attention_mask).last_hidden_state
        finally:
            self._h = None

    def _reduce(self, per_token: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """mean over `where` (the official mean for RTD covers every position), or the paper's sum."""
        if self.rtd_reduction == "sum":
            return (per_token * where).sum()
        # chosen on the device: no row covered gives 0 (the mean of nothing is nan), without waiting to ask
        return torch.where(where.any(), per_token[where].mean(), per_token.sum() * 0)

    def rtd_tokens(self, h: torch.Tensor, edited: torch.Tensor, labels: torch.Tensor,
                   attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per-token cross-entropy, whether each token is detected right, the positions the loss covers: every one
        for the official mean, the real tokens for the paper's sum) of replaced-token detection conditioned on h."""
        logits = self.rtd_head(self._discriminate(h, edited, attention_mask)).float()
        target = labels.long()
        per_token = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view_as(target)
        real = attention_mask == 1
        return per_token, logits.argmax(-1) == target, real if self.rtd_reduction == "sum" else torch.ones_like(real)

    def rtd_loss(self, h: torch.Tensor, edited: torch.Tensor, labels: torch.Tensor,
                 attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Replaced-token detection conditioned on h; returns (loss, per-token accuracy on real tokens). The mean
        covers padding too (official); the sum the real tokens (paper)."""
        per_token, correct, covered = self.rtd_tokens(h, edited, labels, attention_mask)
        return self._reduce(per_token, covered), correct[attention_mask == 1].float().mean()

    def cmlm_loss(self, h: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Conditional MLM: the discriminator sees the masked sentence x' with h at position 0 and recovers the
        original tokens at the selected positions (cross-entropy over the vocabulary); (loss, accuracy)."""
        with torch.no_grad():
            corrupted, selected = self._corrupt(input_ids)
            selected &= attention_mask == 1
        hidden = self._discriminate(h, corrupted, attention_mask)
        logits = self.lm_head(hidden[selected], self.discriminator.get_input_embeddings().weight).float()
        per_token = F.cross_entropy(logits, input_ids[selected], reduction="none")
        loss = per_token.sum() if self.rtd_reduction == "sum" else per_token.mean()
        return loss, (logits.argmax(-1) == input_ids[selected]).float().mean()

    def corrective_loss(self, h: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Conditional corrective LM on the replaced sentence x'' (COCO-LM §3.2, `corrective_lm_loss`):
        L_CLM = Σ_{i∈M} L_LM,i + λ_copy Σ_{i real} L_copy,i, M the masked positions (the official CLM head is
        applied at the masked tokens only, model.py:601-603; its copy head at every non-padding token, :604, :618,
        target ~replaced, :219-222). `rtd_reduction` sum: that sum over the batch; mean: divided by the number of
        real tokens. Returns (loss, accuracy of the vocabulary head's argmax at M)."""
        edited, masked = self.replace_for_correction(input_ids, attention_mask)
        real = attention_mask == 1
        hidden = self._discriminate(h, edited, attention_mask)
        copy_logits = self.lm_head.copy(hidden[real]).squeeze(-1)
        copy_loss = F.binary_cross_entropy_with_logits(copy_logits.float(), (edited == input_ids)[real].float(),
                                                       reduction="none")
        # the vocabulary projection only where L_LM needs it, as the official CLMHead(x, masked_tokens)
        logits = self.lm_head(hidden[masked], self.discriminator.get_input_embeddings().weight)
        lm, _ = corrective_lm_loss(logits, self.lm_head.copy(hidden[masked]).squeeze(-1), input_ids[masked],
                                   edited[masked])
        loss = lm.sum() + COPY_WEIGHT * copy_loss.sum()
        if self.rtd_reduction != "sum":
            loss = loss / real.sum()
        return loss, (logits.argmax(-1) == input_ids[masked]).float().mean()

    def _task_h(self, h: torch.Tensor, rows: int) -> torch.Tensor:
        """The h of each task row: each edited view's own (the first view's alone for edit_views 'first')."""
        views = 2 if self.edit_views == "both" else 1
        return h.view(rows, -1, h.shape[-1])[:, :views].flatten(0, 1)

    def _task_sentences(self, batch: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(ids, attention mask) of the sentences the task works on, one row per `_task_h` row: the views' own
        sentences and/or the next sentence of the corpus (the same next sentence for each view)."""
        views = 2 if self.edit_views == "both" else 1
        rows = []
        if self.target in ("same", "same+next"):
            rows.append((batch["input_ids"][:, :views].flatten(0, 1), batch["attention_mask"][:, :views].flatten(0, 1)))
        if self.target in ("next", "same+next"):
            if "next_input_ids" not in batch:
                raise ValueError("target 'next' needs the next sentence of each sentence: train on an ordered corpus "
                                 "(data=WikiText-103 or Licenses-ordered), whose loader yields (sentence, next) pairs")
            rows.append(tuple(batch[k].repeat_interleave(views, 0) for k in ("next_input_ids", "next_attention_mask")))
        return rows

    def _task_rows(self, batch: dict, h: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(ids, attention mask, h) of the sentences the task works on, each row with its view's h."""
        row_h = self._task_h(h, batch["input_ids"].shape[0])
        return [(ids, mask, row_h) for ids, mask in self._task_sentences(batch)]

    def _conditional_task(self, batch: dict, pooled: torch.Tensor, projected: torch.Tensor) -> dict:
        h = projected if self.condition == "projector" else pooled
        loss, accuracy, labelled = 0.0, [], []
        for group, (ids, mask, row_h) in enumerate(self._task_rows(batch, h)):
            if self.task == "rtd":
                edited, labels, edited_mask = self.edit(ids, mask, drawn=_drawn(batch, group))
                term, acc = self.rtd_loss(row_h, edited, labels, edited_mask)
                labelled.append(labels.float()[edited_mask == 1].mean())
            elif self.task == "cmlm":
                term, acc = self.cmlm_loss(row_h, ids, mask)
            else:
                term, acc = self.corrective_loss(row_h, ids, mask)
            loss, accuracy = loss + term, accuracy + [acc]
        out = {self.task: loss.detach(), f"{self.task}_accuracy": torch.stack(accuracy).mean().detach()}
        if labelled:
            out["edited"] = torch.stack(labelled).mean()
        return {"task_loss": loss, **out}

    def _augmented_contrastive(self, batch: dict) -> torch.Tensor:
        """Table 15: the first view's edited copy x'' as a third view, encoded like the others; an extra negative
        (in the denominator, as supervised SimCSE's hard negative) or an extra positive (the mean of the InfoNCE
        losses with x'' and with the second view as the positive)."""
        _, projected = self.encode_views(self._with_edited_view(batch))
        return self._augmented_loss(projected)

    def _with_edited_view(self, batch: dict) -> dict:
        """The two views and the first view's edited copy as a third, padded to one width."""
        [(edited, _, edited_mask)] = self._edits(batch)
        edited = edited.masked_fill(edited_mask == 0, self.pad_id)  # encoded as an ordinary sentence
        length = max(batch["input_ids"].shape[-1], edited.shape[-1])

        def widen(x, value):
            return F.pad(x, (0, length - x.shape[-1]), value=value)

        return {"input_ids": torch.cat([widen(batch["input_ids"], self.pad_id), widen(edited, self.pad_id)[:, None]], 1),
                "attention_mask": torch.cat([widen(batch["attention_mask"], 0), widen(edited_mask, 0)[:, None]], 1)}

    def _augmented_loss(self, projected: torch.Tensor) -> torch.Tensor:
        z = projected.view(-1, 3, projected.shape[-1])
        if self.task == "negative":
            return self.info_nce(z[:, 0], z[:, 1], z[:, 2])
        return (self.info_nce(z[:, 0], z[:, 1]) + self.info_nce(z[:, 0], z[:, 2])) / 2

    @staticmethod
    def check_views(batch: dict) -> int:
        views = batch["input_ids"].shape[1]
        if views != 2:
            raise ValueError(f"DiffCSE trains on two dropout views of unlabelled sentences; got {views} views")
        return views

    def forward(self, batch: dict) -> dict:
        views = self.check_views(batch)
        if self.task in ("positive", "negative"):
            loss = self._augmented_contrastive(batch)
            return {"loss": loss, "contrastive": loss.detach()}
        pooled, projected = self.encode_views(batch)
        out = self._conditional_task(batch, pooled, projected)
        loss = self.lam * out.pop("task_loss")
        if self.use_contrastive:
            contrastive = self.contrastive_loss(projected, views)
            loss, out["contrastive"] = loss + contrastive, contrastive.detach()
        return {"loss": loss, **out}


    # --- gradient caching (cse_kit.methods.grad_cache): the edits drawn for the whole batch; the encoder chunk by
    # chunk; the projector (BatchNorm: the batch's statistics) and InfoNCE on the whole batch; the discriminator
    # chunk by chunk on the edited sentences, each chunk's gradient reaching h, and through it the projector and
    # the encoder's cached gradient ---

    def cache_refusal(self) -> str | None:
        if self.task in ("cmlm", "corrective"):
            return (f"DiffCSE's {self.task} ablation draws its masks inside the loss, which is not chunked; "
                    "the method (task=rtd) and Table 15's positive/negative are")
        return None

    def cache_inputs(self, batch: dict) -> dict:
        self.check_views(batch)
        if self.task in ("positive", "negative"):
            return {"main": self._with_edited_view(batch)}
        main = {k: batch[k] for k in ("input_ids", "attention_mask")}
        return {"main": main, "shared": self._edits(batch)}

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        pooled = reps["main"].flatten(0, 1)
        projected = self.projector(pooled)
        if self.task in ("positive", "negative"):
            loss = self._augmented_loss(projected)
            return loss, {"loss": loss, "contrastive": loss.detach()}
        h = projected if self.condition == "projector" else pooled
        row_h = self._task_h(h, len(reps["main"]))
        task, out = self._cached_rtd(row_h, inputs["shared"], backward, chunk)
        loss, graph = self.lam * task, pooled.new_zeros(())
        if self.use_contrastive:
            contrastive = self.contrastive_loss(projected, 2)
            loss, graph, out["contrastive"] = loss + contrastive, contrastive, contrastive.detach()
        return graph, {"loss": loss, **out}

    def _cached_rtd(self, row_h: torch.Tensor, edits: list, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        """The RTD loss of every edited row, `chunk` rows of the discriminator at a time, each chunk's share
        (λ times its part of the mean or sum) backpropagated at once into the discriminator and into h; h's
        gradient is then sent back through the projector (its graph kept for the contrastive term's backward).
        Returns (the loss, the outputs forward gives)."""
        h = row_h.detach().requires_grad_()
        loss, correct, edited = 0.0, [], []
        for ids, labels, mask in edits:
            # the official mean covers every position of the edited batch, padding included (rtd_tokens)
            denominator = 1 if self.rtd_reduction == "sum" else max(mask.numel(), 1)
            part_loss, right, count = 0.0, 0, 0
            for piece in chunks(len(ids), chunk):
                per_token, good, where = self.rtd_tokens(h[piece], ids[piece], labels[piece], mask[piece])
                part = (per_token * where).sum() / denominator
                backward(self.lam * part)
                part_loss = part_loss + part.detach()
                right, count = right + (good & (mask[piece] == 1)).sum(), count + (mask[piece] == 1).sum()
            loss = loss + part_loss
            correct.append(right / count)
            edited.append(labels.float()[mask == 1].mean())
        if h.grad is not None:
            with torch.autocast(h.device.type, enabled=False):
                row_h.backward(h.grad.to(row_h.dtype), retain_graph=True)  # h.grad already carries the scale
        return loss, {"rtd": loss, "rtd_accuracy": torch.stack(correct).mean().float(),
                      "edited": torch.stack(edited).mean()}


def _drawn(batch: dict, group: int) -> dict | None:
    """The host's draws for the group-th sentences the task edits (DiffCSE.host_inputs), or None."""
    prefix = f"edit{group}_"
    drawn = {k[len(prefix):]: v for k, v in batch.items() if k.startswith(prefix)}
    return drawn or None


def needs_generator(task: str, edit: str) -> bool:
    """The conditional MLM masks only; deletion deletes only; everything else fills tokens with the generator."""
    return task != "cmlm" and edit != "delete"


def check_ablation(task: str, edit: str, target: str, contrastive: bool) -> None:
    """The combinations the paper's ablations define; others fail naming what to change."""
    if task in ("cmlm", "corrective") and edit != "replace":
        raise ValueError(f"task {task!r} recovers replaced/masked tokens: it needs edit='replace', got {edit!r}")
    if task in ("positive", "negative") and (target != "same" or not contrastive):
        raise ValueError(f"task {task!r} adds the edited sentence to SimCSE's loss: it needs target='same' and "
                         "contrastive=True")
