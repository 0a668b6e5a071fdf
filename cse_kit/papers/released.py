"""The papers' released checkpoints (released.json): Hub id, the pooler each must be evaluated with, the paper row it
stands for and where that comes from. They answer a researcher's first question about a gap, training or
evaluation: on the `paper` profile the main tables evaluate them beside the paper's number and the kit's own
training; `cse-kit eval --model <id>` picks the registered pooler by itself."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..experiments import RELEASED_SUFFIX, Row

RELEASED_FILE = Path(__file__).with_name("released.json")


@lru_cache(maxsize=1)
def checkpoints() -> dict[str, dict]:
    """Hub id -> its entry (paper, row, pooler, backbone, source, expected)."""
    return {entry["id"]: entry for entry in json.loads(RELEASED_FILE.read_text(encoding="utf-8"))["checkpoints"]}


def lookup(model: str) -> dict | None:
    return checkpoints().get(model)


def released_row(model_id: str, label: str, profile: str) -> Row:
    """The row that evaluates a released checkpoint as it is, labelled after the paper row it stands for. It needs
    the Hub, so only the `paper` profile runs it; elsewhere it is shown as not run, with that reason."""
    entry = checkpoints()[model_id]
    if profile != "paper":
        return Row(label + RELEASED_SUFFIX, unavailable="released checkpoints need the Hub: they are evaluated on the "
                   "paper profile", missing=model_id)
    return Row(label + RELEASED_SUFFIX, model=model_id, pooler=entry["pooler"])
