"""A record's numbers as a table's columns, under the papers' column names: STS and transfer test accuracy, the dev
scores, retrieval, alignment and uniformity, training cost."""

from __future__ import annotations

import math

from ..train.presets import PROFILES


STS_COLUMNS = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
               "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}

TRANSFER_COLUMNS = {"MR": "MR", "CR": "CR", "SUBJ": "SUBJ", "MPQA": "MPQA", "SST2": "SST", "TREC": "TREC",
                    "MRPC": "MRPC"}


def sts_test_columns(record: dict) -> dict:
    sts = record["metrics"]["sts_test"]
    out = {col: (sts[t]["all"]["spearman"] if "all" in sts[t] else sts[t]["test"]["spearman"])
           for t, col in STS_COLUMNS.items()}
    return {**out, "Avg.": sts["avg"]}


def transfer_test_columns(record: dict) -> dict:
    name = next(k for k in ("transfer_test", "transfer_fasttest") if k in record["metrics"])
    tr = record["metrics"][name]
    return {**{col: tr[t]["acc"] for t, col in TRANSFER_COLUMNS.items()}, "Avg.": tr["avg"]}


def dev_columns(record: dict) -> dict:
    out = {"STS-B": record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]}
    if "transfer_dev" in record["metrics"]:
        out["Avg. transfer"] = record["metrics"]["transfer_dev"]["avg"]
    return out


def retrieval_columns(record: dict) -> dict:
    r = record["metrics"]["geometry"]["retrieval"]
    return {f"@{k}": r[f"recall@{k}"] for k in (1, 5, 10)}


def geometry_columns(record: dict) -> dict:
    g = record["metrics"]["geometry"]["align_uniform"]
    return {"Alignment": g["alignment"], "Uniformity": g["uniformity"], "STS": record["metrics"]["sts_test"]["avg"]}


def training_cost(record: dict) -> tuple[float, float, bool]:
    """(training seconds per step, stage-1 and main steps alike, evaluation left out; peak memory in bytes, the
    GPU's on CUDA and the process's resident memory elsewhere (NaN where unknown); whether it is the GPU's)."""
    train = record["train"]
    gpu = train.get("peak_gpu_memory_bytes")
    return (record["timings"]["train_train_s"] / train["steps"], gpu or train.get("peak_rss_bytes") or math.nan,
            bool(gpu))


def transfer_eval(profile: str) -> str:
    """The transfer evaluation a profile reports test accuracy with (the papers: SentEval's `test` config)."""
    return f"transfer_{PROFILES[profile]['report']['transfer_mode']}"
