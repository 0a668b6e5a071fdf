"""The numbers a card shows: the record's STS (from its STS test, or from the head-to-head's per-pair cosines),
transfer and MTEB results, their mean ± std over seeds, and the row the papers print for the run's preset."""

from __future__ import annotations

import math
from functools import lru_cache

from ..data import DataError
from ..data.published import PAPERS, paper_setting, paper_spec, paper_value
from ..eval.sts import headline
from ..experiments import STS_COLUMNS, TRANSFER_COLUMNS
from ..papers.comparison import gold, sts_columns
from .run import PublishError


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


def sts_values(record: dict, data_dir) -> dict | None:
    """STS test Spearman ×100 by column (STS12 ... SICK-R, Avg.), the SentEval 'all' aggregation: the record's STS
    test evaluation, else the same numbers from its per-pair cosines (`sts_pairs`, the head-to-head's) against the gold
    scores in data_dir; None where it has neither."""
    metrics = record["metrics"]
    if metrics.get("sts_test"):
        sts = metrics["sts_test"]
        return {**{col: headline(task, sts[task]) for task, col in STS_COLUMNS.items()}, "Avg.": sts["avg"]}
    if "sts_pairs" not in metrics:
        return None
    scores = sts_columns(record, _gold(record, str(data_dir)))
    return {**{col: scores[task] for task, col in STS_COLUMNS.items()}, "Avg.": scores["Avg. STS"]}


def sts_sample(record: dict) -> int | None:
    """The pairs per subset sts_values read (the smoke profile's sampled STS test), None for the whole test sets."""
    return record["metrics"].get("sts_test", {}).get("sample_per_subset")


def _gold(record: dict, data_dir: str) -> dict:
    """The STS test gold scores of data_dir that the record's per-pair cosines are correlated with."""
    try:
        scores = _gold_scores(data_dir)
    except DataError as err:
        raise PublishError(f"record {record['key']} holds per-pair cosines, whose STS numbers need the gold scores "
                           f"of {data_dir}: {err}") from None
    wrong = [task for task, cosines in record["metrics"]["sts_pairs"].items() if len(cosines) != len(scores[task])]
    if wrong:
        raise PublishError(f"record {record['key']}'s per-pair cosines of {', '.join(wrong)} are not the test pairs "
                           f"of {data_dir}: set CSE_KIT_DATA to the data folder it was evaluated with")
    return scores


@lru_cache(maxsize=2)
def _gold_scores(data_dir: str) -> dict:
    return gold(data_dir)


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
