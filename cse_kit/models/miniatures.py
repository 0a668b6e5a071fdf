"""Google's BERT miniatures (Turc et al. 2019, "Well-Read Students Learn Better"; Apache-2.0 on the Hub as
`google/bert_uncased_L-{L}_H-{H}_A-{H/64}`): masked-LM-pretrained BERTs with bert-base-uncased's vocabulary and their
MLM heads, what the `mini` profile trains on: their names and shapes (same-shaped random-weight stand-ins:
cse_kit.models.standins)."""

from __future__ import annotations

import json
import re
from pathlib import Path

#: Turc et al.'s grid: layers x hidden sizes, every combination released; heads = hidden / 64, feed-forward 4 x hidden
LAYERS, HIDDEN = (2, 4, 6, 8, 10, 12), (128, 256, 512, 768)
NAME = re.compile(r"^google/bert_uncased_L-(?P<layers>\d+)_H-(?P<hidden>\d+)_A-(?P<heads>\d+)$")


def is_miniature(ref: str) -> bool:
    match = NAME.match(ref)
    return bool(match) and int(match["layers"]) in LAYERS and int(match["hidden"]) in HIDDEN \
        and int(match["heads"]) == int(match["hidden"]) // 64


def miniature_id(layers: int, hidden: int) -> str:
    return f"google/bert_uncased_L-{layers}_H-{hidden}_A-{hidden // 64}"


def config_dict(ref: str) -> dict:
    """The miniature's config.json as its Hub repository holds it (bert-base-uncased's, scaled)."""
    if not is_miniature(ref):
        raise ValueError(f"{ref} is not one of Google's BERT miniatures ({miniature_id(4, 256)} and the like)")
    match = NAME.match(ref)
    hidden = int(match["hidden"])
    return {"hidden_size": hidden, "hidden_act": "gelu", "initializer_range": 0.02, "vocab_size": 30522,
            "hidden_dropout_prob": 0.1, "num_attention_heads": hidden // 64, "type_vocab_size": 2,
            "max_position_embeddings": 512, "num_hidden_layers": int(match["layers"]), "intermediate_size": 4 * hidden,
            "attention_probs_dropout_prob": 0.1}


def bert_config_where_untyped(folder: Path):
    """A BertConfig for a model folder whose config.json names no `model_type` (a BERT miniature's, or a local copy
    of one: load_model asks only for those), else None: transformers 5 no longer guesses the type from the name as
    4.x did, and the miniatures' configs predate the key."""
    try:
        values = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if "model_type" in values:
        return None
    from transformers import BertConfig

    return BertConfig.from_dict(values)
