"""The edits of DiffCSE's equivariance task besides MLM replacement (paper §5 "Augmentation Methods", Table 4;
neither is in the official code): insertion ([MASK] tokens at random positions, which the generator then fills;
label: inserted vs original) and deletion (label per kept token: was the token right before it deleted).

Rows are lists of token ids of one sentence with its special tokens at both ends ([CLS] ... [SEP], <s> ... </s>);
only the tokens between them are edited. The edit count is `ratio` of those tokens, rounded, at least one."""

from __future__ import annotations

import torch


def edit_count(ratio: float, tokens: int) -> int:
    return max(1, round(ratio * tokens)) if tokens else 0


def insert_masks(ids: list[int], ratio: float, mask_id: int, generator: torch.Generator | None = None
                 ) -> tuple[list[int], list[bool]]:
    """(ids with [MASK]s inserted, inserted flags). The inserted tokens take a uniformly random subset of the
    slots of the longer sentence, the original tokens keep their order in the others."""
    body = ids[1:-1]
    k = edit_count(ratio, len(body))
    slots = set(torch.randperm(len(body) + k, generator=generator)[:k].tolist())
    originals = iter(body)
    new_body = [mask_id if slot in slots else next(originals) for slot in range(len(body) + k)]
    inserted = [False] + [slot in slots for slot in range(len(body) + k)] + [False]
    return [ids[0], *new_body, ids[-1]], inserted


def delete_tokens(ids: list[int], ratio: float, generator: torch.Generator | None = None
                  ) -> tuple[list[int], list[bool]]:
    """(ids with tokens deleted, per kept token: was the token right before it in the original deleted)."""
    body = ids[1:-1]
    deleted = set((torch.randperm(len(body), generator=generator)[:edit_count(ratio, len(body))] + 1).tolist())
    kept = [i for i in range(len(ids)) if i not in deleted]
    return [ids[i] for i in kept], [i - 1 in deleted for i in kept]


def pad_rows(rows: list[list[int]], flags: list[list[bool]], pad_id: int, device=None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, flags, attention mask) of variable-length rows, right-padded to the longest."""
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    labels = torch.zeros((len(rows), length), dtype=torch.bool)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, (row, flag) in enumerate(zip(rows, flags)):
        ids[i, :len(row)] = torch.tensor(row)
        labels[i, :len(row)] = torch.tensor(flag)
        mask[i, :len(row)] = 1
    return ids.to(device), labels.to(device), mask.to(device)


def unpad(ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    return [row[m == 1].tolist() for row, m in zip(ids, attention_mask)]
