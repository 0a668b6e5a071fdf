"""Masked-LM corruption, shared by DiffCSE's generator input and the fitting of an MLM head (cse_kit.methods.mlm_head)."""

from __future__ import annotations

import torch


def special_token_ids(tokenizer) -> torch.Tensor:
    """Ids MLM corruption never selects ([CLS], [SEP], [PAD], ...)."""
    return torch.tensor(sorted(set(tokenizer.all_special_ids)))


def mlm_corrupt(input_ids: torch.Tensor, special: torch.Tensor, ratio: float, mask_id: int, vocab_size: int,
                generator: torch.Generator | None = None, bert: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MLM corruption as the official collator: each non-special token is selected with probability `ratio`; of
    those 80% become [MASK], 10% a random token, 10% stay (`bert=False`: all become [MASK]).
    Returns (corrupted ids, selected)."""
    def coin(p, like):
        return torch.rand(like.shape, device=like.device, generator=generator) < p

    selected = coin(ratio, input_ids) & ~special
    if not bert:
        return input_ids.masked_fill(selected, mask_id), selected
    masked = selected & coin(0.8, input_ids)
    randomized = selected & ~masked & coin(0.5, input_ids)
    out = input_ids.masked_fill(masked, mask_id)
    random_ids = torch.randint(vocab_size, input_ids.shape, device=input_ids.device, generator=generator)
    return torch.where(randomized, random_ids, out), selected
