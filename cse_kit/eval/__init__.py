"""Our implementation of the papers' SentEval protocol (SimCSE's fork): STS, transfer, geometry, retrieval."""

from .dev import DevEvaluator
from .encode import POOLERS, Encoder, pool
from .geometry import align_uniform, alignment, nearest, retrieval_recall, similarity_by_gold_bin, uniformity
from .runner import MODES, evaluate, format_tables, parse_tasks
from .sts import aggregate, correlations, cosine_rows
from .transfer import TRANSFER_TASKS, evaluate_transfer_task, load_task

__all__ = ["DevEvaluator", "Encoder", "MODES", "POOLERS", "TRANSFER_TASKS", "aggregate", "align_uniform",
           "alignment", "correlations", "cosine_rows", "evaluate", "evaluate_transfer_task", "format_tables",
           "load_task", "nearest", "parse_tasks", "pool", "retrieval_recall", "similarity_by_gold_bin", "uniformity"]
