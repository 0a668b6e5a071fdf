"""Random-weight stand-ins of Google's BERT miniatures (cse_kit.models.miniatures) written as their Hub repositories
hold them, so the mini profile's code paths run where the Hub cannot be reached (the suite, a loopback server,
bench/mini_budget.py). Never for numbers."""

from __future__ import annotations

import json
from pathlib import Path

from . import resolve_reference
from .miniatures import config_dict

#: the files a stand-in holds, as the miniatures' Hub repositories do (uploaded in 2020: a config.json without
#: `model_type`, written before transformers read one; the vocabulary; PyTorch weights of BertForPreTraining)
STANDIN_FILES = ("config.json", "vocab.txt", "pytorch_model.bin")


def write_standin(ref: str, folder, seed: int = 0) -> Path:
    """A random-weight stand-in of the miniature `ref` in `folder`: its exact configuration, bert-base-uncased's
    vocabulary (from the packaged all-MiniLM-L6-v2, the same file) and BertForPreTraining weights (encoder, NSP
    pooler, MLM and NSP heads), the same on every call. For tests and timings without the Hub; never for numbers."""
    import shutil

    import torch
    from transformers import BertConfig, BertForPreTraining

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    values = config_dict(ref)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BertForPreTraining(BertConfig(**values))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(values, indent=2), encoding="utf-8")
    shutil.copyfile(Path(resolve_reference("all-MiniLM-L6-v2")) / "vocab.txt", folder / "vocab.txt")
    return folder
