"""The dev evaluator for training loops: encodes only the dev sentences, cheap enough for every 125 steps."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..data import load_sts
from .encode import Encoder
from .sts import correlations, pair_scores
from .transfer import TRANSFER_TASKS, evaluate_transfer_task, load_task
from .user_tasks import load_user_pairs


class DevEvaluator:
    """Call with a model: {"stsb_spearman", ["sickr_spearman", "avg_sts"], ["transfer_devacc", "<TASK>_devacc"],
    ["dev_data_spearman"], "seconds"}. Dev data is loaded once. The model's train/eval mode is restored afterwards.

    sickr=True adds SICK-R dev (SCD selects on it); transfer=True adds SentEval's fast-config dev accuracy of the
    seven transfer tasks (DiffCSE selects its transfer models on their average), which encodes far more."""

    def __init__(self, tokenizer, pooler: str = "cls_before_pooler", data_dir=None, *, sickr: bool = False,
                 transfer: bool = False, batch_size: int = 128, device=None, template: str | None = None,
                 max_length: int | None = None, dev_data: str | None = None):
        self.tokenizer, self.pooler, self.batch_size, self.device = tokenizer, pooler, batch_size, device
        self.template = template  # the prompt poolers' template
        self.max_length = max_length  # sentences cut at this many tokens (None: whole)
        self.sts = {"stsb": load_sts("STSBenchmark", "dev", data_dir)}
        if sickr:
            self.sts["sickr"] = load_sts("SICKRelatedness", "dev", data_dir)
        if dev_data:  # a researcher's own dev pairs (an STS-style CSV): "dev_data_spearman"
            self.sts["dev_data"] = load_user_pairs(Path(dev_data))
        self.transfer = [load_task(t, data_dir) for t in TRANSFER_TASKS] if transfer else []

    def __call__(self, model) -> dict:
        start = time.perf_counter()
        was_training = model.training
        encoder = Encoder(model, self.tokenizer, self.pooler, batch_size=self.batch_size, device=self.device,
                          progress=False, template=self.template, max_length=self.max_length)
        try:
            out = {f"{name}_spearman": correlations(*pair_scores(encoder, pairs))["spearman"]
                   for name, pairs in self.sts.items()}
            if "sickr" in self.sts:
                out["avg_sts"] = float(np.mean([out[f"{n}_spearman"] for n in ("stsb", "sickr")]))
            for data in self.transfer:
                out[f"{data.task}_devacc"] = evaluate_transfer_task(encoder, data, "dev")["devacc"]
            if self.transfer:
                out["transfer_devacc"] = float(np.mean([out[f"{d.task}_devacc"] for d in self.transfer]))
        finally:
            model.train(was_training)
        out["seconds"] = time.perf_counter() - start
        return out
