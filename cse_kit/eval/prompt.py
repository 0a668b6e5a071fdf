"""Prompt-based sentence representation (PromptBERT, Jiang et al. 2022; used by DiffAug): the sentence is put into
a hard template, `This sentence of "[X]" means [MASK] .`, and its vector is the last hidden state at [MASK].
Template denoising subtracts the [MASK] state of the empty template whose positions after the sentence slot are
shifted by the sentence's length, so that the template's own bias cancels.

Two ways to fill the template, as the official code: training fills it with token ids (the sentence truncated to
max_seq_length sub-words, then wrapped: DiffAug train.py:609-612), evaluation with text (the filled string
tokenized whole, untruncated: DiffAug evaluation.py:79-87). For BERT's tokenizer the two give the same ids."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

#: PromptBERT's BERT template (its id "00", DiffAug utils.py:39 and evaluation.py:45); *sent0* is the sentence,
#: *mask* the tokenizer's mask token
PROMPTBERT_BERT = 'This sentence of "*sent0*" means*mask*.'


class Template:
    """A hard template for one tokenizer: `before` ([CLS] + the words before the sentence) and `after` (the words
    after it, the mask token among them, + [SEP]), as the official get_encoded_bs_and_es (DiffAug utils.py:64-86)."""

    def __init__(self, tokenizer, text: str = PROMPTBERT_BERT):
        if text.count("*sent0*") != 1 or text.count("*mask*") != 1:
            raise ValueError(f"a template needs one *sent0* (the sentence) and one *mask*, got {text!r}")
        if tokenizer.mask_token is None:
            raise ValueError(f"{tokenizer.name_or_path} has no mask token: a prompt template needs one")
        self.text = text
        self.mask_token_id = tokenizer.mask_token_id
        before, after = text.replace("*mask*", tokenizer.mask_token).split("*sent0*")
        self.before = [tokenizer.cls_token_id] + tokenizer.encode(before.strip(), add_special_tokens=False)
        self.after = tokenizer.encode(after, add_special_tokens=False) + [tokenizer.sep_token_id]
        self._filled = text.replace("*mask*", tokenizer.mask_token)

    def __len__(self) -> int:
        """Tokens of the empty template, [CLS] and [SEP] included."""
        return len(self.before) + len(self.after)

    def wrap_ids(self, sentence_ids: list[int]) -> list[int]:
        return self.before + list(sentence_ids) + self.after

    def wrap_text(self, sentence: str) -> str:
        return self._filled.replace("*sent0*", sentence).strip()

    def denoising_inputs(self, lengths: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, position_ids) of the empty template, one row per length n: positions start at `offset` (the
        prefix length the encoder's positions are shifted by) and those after the sentence slot move by n, as the
        official get_delta (DiffAug diffaug/models.py:109-118; PromptBERT's own code likewise)."""
        rows = len(lengths)
        ids = torch.tensor(self.before + self.after, device=lengths.device).expand(rows, -1)
        positions = torch.arange(offset, offset + len(self), device=lengths.device).repeat(rows, 1)
        positions[:, len(self.before):] += lengths.unsqueeze(-1)
        return ids, positions


def mask_states(last_hidden: torch.Tensor, input_ids: torch.Tensor, mask_token_id: int) -> torch.Tensor:
    """(rows, hidden): each row's state at its last mask token (the template's: a mask token the sentence itself
    holds comes before it; the official `last_hidden[input_ids == mask_id]` assumes there is one)."""
    is_mask = input_ids == mask_token_id
    # asserted on the device (a GPU step does not wait for the answer); a CPU raises here
    torch._assert_async(is_mask.any(dim=1).all(),
                        "a row has no mask token: prompt pooling needs inputs filled into the template")
    last = is_mask.shape[1] - 1 - is_mask.flip(1).int().argmax(dim=1)
    return last_hidden[torch.arange(len(input_ids), device=input_ids.device), last]


def sentence_lengths(attention_mask: torch.Tensor, template: Template) -> torch.Tensor:
    """Sub-words of the sentence in each templated row."""
    return attention_mask.sum(-1) - len(template)


def first_position(encoder: nn.Module) -> int:
    """The position id an encoder gives a row's first token: RoBERTa's embeddings count from padding_idx + 1
    (create_position_ids_from_input_ids), BERT's from 0."""
    embeddings = encoder.embeddings
    return embeddings.padding_idx + 1 if hasattr(embeddings, "create_position_ids_from_input_ids") else 0


def with_period(sentence: str) -> str:
    """The sentence with "." appended unless it is empty or ends in one of . ? " ' (PromptBERT's evaluation.py:201;
    "!" is not among them)."""
    return sentence + "." if sentence and sentence[-1] not in ".?\"'" else sentence


#: PromptReading.head: what the trained head is and where it sits. mlm_transform: BERT's MLM-head transform (dense,
#: activation, LayerNorm) on the [MASK] state and on the template rows, before the subtraction (PromptBERT's
#: evaluation.py:295-302); mlp: Linear + tanh after it (:305-307)
PROMPT_HEADS = ("mlm_transform", "mlp")


@dataclass(frozen=True)
class PromptReading:
    """How the prompt poolers read a sentence, beyond the pooler's [MASK] state and its denoising.

    template: the template text (*sent0*, *mask*). fill: "text" fills the sentence into the template as text and
    tokenizes the whole (PromptBERT's and DiffAug's evaluation.py), "ids" wraps the sentence's own sub-words in the
    template's ids (PromptBERT's dev evaluation, models.py:307-335; for BERT the two agree). append_period: the
    "." rule of `with_period`. denoise_positions: where the empty template's positions start, "from-zero" (the
    official get_delta) or "sentence" (the position the encoder gives a row's first token: the paper's denoising).
    head / head_kind: a trained head (PROMPT_HEADS) and its kind, or None."""

    template: str
    fill: str = "text"
    append_period: bool = False
    denoise_positions: str = "from-zero"
    head: nn.Module | None = None
    head_kind: str | None = None

    def __post_init__(self):
        if self.fill not in ("text", "ids"):
            raise ValueError(f"unknown prompt fill {self.fill!r}; choose text or ids")
        if self.denoise_positions not in ("from-zero", "sentence"):
            raise ValueError(f"unknown denoise_positions {self.denoise_positions!r}; choose from-zero or sentence")
        if (self.head is None) != (self.head_kind is None) or self.head_kind not in (None, *PROMPT_HEADS):
            raise ValueError(f"a prompt head needs its kind, one of {', '.join(PROMPT_HEADS)}; got {self.head_kind!r}")

    def describe(self) -> dict:
        """What cse_kit.json records (the head's weights are saved beside it)."""
        return {"template": self.template, "fill": self.fill, "append_period": self.append_period,
                "denoise_positions": self.denoise_positions, "head": self.head_kind}

