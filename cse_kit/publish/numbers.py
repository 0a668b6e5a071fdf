"""The numbers a card shows: the record's STS, transfer and MTEB results, their mean ± std over seeds, and the row the
papers print for the run's preset."""

from __future__ import annotations

import math

from ..data.published import PAPERS, paper_setting, paper_spec, paper_value
from ..experiments import STS_COLUMNS, TRANSFER_COLUMNS


#: preset -> the printed rows that stand for it: (paper, table, row) with STS columns (STS12 ... Avg.) or transfer
#: columns (MR ... Avg.); an official-code preset stands for the paper's row as its paper preset does
PAPER_ROWS = {
    "simcse-bert": [("diffcse", 1, "SimCSE-BERT-base"), ("diffcse", 2, "SimCSE-BERT-base")],
    "simcse-roberta": [("diffcse", 1, "SimCSE-RoBERTa-base"), ("diffcse", 2, "SimCSE-RoBERTa-base")],
    "simcse-sup-bert": [("diffaug", 1, "SimCSE (supervised)")],
    "diffcse-bert-sts": [("diffcse", 1, "DiffCSE-BERT-base")],
    "diffcse-roberta-sts": [("diffcse", 1, "DiffCSE-RoBERTa-base")],
    "diffcse-bert-transfer": [("diffcse", 2, "DiffCSE-BERT-base")],
    "diffcse-roberta-transfer": [("diffcse", 2, "DiffCSE-RoBERTa-base")],
    "scd-bert": [("scd", 1, "SCD-BERT-base"), ("scd", 2, "SCD-BERT-base")],
    "scd-bert-official": [("scd", 1, "SCD-BERT-base"), ("scd", 2, "SCD-BERT-base")],
    "scd-roberta": [("scd", 1, "SCD-RoBERTa-base"), ("scd", 2, "SCD-RoBERTa-base")],
    "esimcse-bert": [("esimcse", 3, "ESimCSE-BERT-base"), ("esimcse", 11, "ESimCSE")],
    "esimcse-bert-large": [("esimcse", 3, "ESimCSE-BERT-large")],
    "esimcse-roberta": [("esimcse", 3, "ESimCSE-RoBERTa-base")],
    "esimcse-roberta-large": [("esimcse", 3, "ESimCSE-RoBERTa-large")],
    "diffaug-semi-bert": [("diffaug", 1, "DiffAug (ours)")],
    "diffaug-semi-bert-official": [("diffaug", 1, "DiffAug (ours)")],
    "diffaug-semi-aux-bert": [("diffaug", 1, "DiffAug (ours) w/ aux loss")],
    "diffaug-semi-aux-bert-official": [("diffaug", 1, "DiffAug (ours) w/ aux loss")],
    "diffaug-sup-bert": [("diffaug", 1, "DiffAug (ours) (supervised)")],
    "diffaug-sup-bert-official": [("diffaug", 1, "DiffAug (ours) (supervised)")],
    "promptbert-bert": [("diffaug", 1, "PromptBERT")],
    "promptbert-sup-bert": [("diffaug", 1, "PromptBERT (supervised)")],
    "consert-bert": [("diffaug", 1, "ConSERT")],
}


def sts_values(record: dict) -> dict | None:
    """STS test Spearman ×100 by column (STS12 ... SICK-R, Avg.), the SentEval 'all' aggregation, or None."""
    sts = record["metrics"].get("sts_test")
    if not sts:
        return None
    out = {col: (sts[t]["all"]["spearman"] if "all" in sts[t] else sts[t]["test"]["spearman"])
           for t, col in STS_COLUMNS.items()}
    return {**out, "Avg.": sts["avg"]}


def transfer_values(record: dict) -> tuple[str, dict] | None:
    """(evaluation name, accuracy by column MR ... MRPC, Avg.) of the record's transfer test, or None."""
    name = next((k for k in ("transfer_test", "transfer_fasttest") if k in record["metrics"]), None)
    if name is None:
        return None
    tr = record["metrics"][name]
    return name, {**{col: tr[t]["acc"] for t, col in TRANSFER_COLUMNS.items()}, "Avg.": tr["avg"]}


def mteb_values(record: dict) -> dict:
    """MTEB task -> its stored result (main score 0-1, mteb's TaskResult)."""
    return dict(record["metrics"].get("mteb", {}))


def over_seeds(values: list[float]) -> tuple[float, float, int]:
    """mean, std (ddof 1; NaN for one value), n."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return mean, std, n


def paper_numbers(preset: str | None, kind: str, method: str | None = None) -> tuple[str, dict] | None:
    """(where: "DiffCSE Table 1, DiffCSE-BERT-base", column -> printed value) of the preset's row of `kind` ("sts" or
    "transfer"), or None where the papers print none; none either for another method trained on the preset (a method
    of one's own on SimCSE's preset is not SimCSE)."""
    from ..train.presets import PRESETS

    if method is not None and preset in PRESETS and PRESETS[preset][1]["method"] != method:
        return None
    for paper, table, row in PAPER_ROWS.get(preset, []):
        spec = paper_spec(paper)["tables"][str(table)]
        if (kind == "sts") != ("STS12" in spec["columns"]):
            continue
        setting = paper_setting(table, row, paper)
        values = {col: paper_value(table, row, col, paper, setting=setting) for col in spec["columns"]}
        return f"{PAPERS[paper]} Table {table}, {row}" + (f" ({setting})" if setting else ""), values
    return None
