"""ESimCSE (Wu et al., COLING 2022): which run stands behind each row of its eleven tables, the notebooks' parameter
checks, and the notebooks that reproduce it.

Every trained row is the `esimcse-<backbone>` preset with overrides, so shared rows are trained once: ESimCSE
(Table 4) = sub-word repetition (Table 5) = dup_rate 0.32 (Table 9) = 2.5 x batch_size (Table 10 on the paper
profile). Table 4's "+ word repetition" and Table 6's "wr" are the same run (repetition, no momentum queue; papers.md
§8 item 11); Table 5's rows keep the momentum queue (its "+Sub-word Repetition" is the full ESimCSE)."""

from __future__ import annotations

from ..experiments import Row, check
from ..paper import paper_table
from ..train.presets import build_config
from .released import released_row

#: notebook -> the ESimCSE artefacts it reproduces, in the paper's order (the report's coverage reads this)
NOTEBOOKS = {
    "esimcse_table3_sts": ["Table 3"], "esimcse_table4_components": ["Table 4"],
    "esimcse_table5_extension": ["Table 5"], "esimcse_table6_bucketing": ["Table 6"],
    "esimcse_table9_dup_rate": ["Table 9"], "esimcse_table10_queue": ["Table 10"],
    "esimcse_table11_transfer": ["Table 11"],
}
#: artefact -> the (row, column) of its notebook's comparison the report's coverage matrix quotes
HEADLINES = {
    "Table 3": ("ESimCSE-BERT-base", "Avg."), "Table 4": ("ESimCSE", "STS-B"),
    "Table 5": ("+Sub-word Repetition", "STS-B"), "Table 6": ("wr", "STS-B"), "Table 9": ("0.32", "STS-B"),
    "Table 10": ("2.5 × batch_size", "STS-B"), "Table 11": ("ESimCSE", "Avg."),
}

BACKBONE_LABELS = {"bert": "BERT-base", "bert-large": "BERT-large", "roberta": "RoBERTa-base",
                   "roberta-large": "RoBERTa-large"}
#: backbone -> (SimCSE's released checkpoint, ESimCSE's), cse_kit/papers/released.json
RELEASED = {"bert": ("princeton-nlp/unsup-simcse-bert-base-uncased", "ffgcc/esimcse-bert-base-uncased"),
            "bert-large": ("princeton-nlp/unsup-simcse-bert-large-uncased", "ffgcc/esimcse-bert-large-uncased"),
            "roberta": ("princeton-nlp/unsup-simcse-roberta-base", "ffgcc/esimcse-roberta-base"),
            "roberta-large": ("princeton-nlp/unsup-simcse-roberta-large", "ffgcc/esimcse-roberta-large")}
DUP_RATES = [0.08, 0.12, 0.16, 0.2, 0.24, 0.28, 0.32, 0.36]  # Table 9
QUEUE_FACTORS = [1, 1.5, 2, 2.5, 3]  # Table 10: queue size / batch size
BUCKETS = ["3", "4", "5", "6", "7", "8", "3-8"]  # Table 6: two buckets at b, or the six fine-grained ones
#: Table 5 row -> (length_extension, dup_level); the insertions go after each selected word, as the paper says
EXTENSIONS = {"+Inserting Stop-words": ("stopword", "word"), "+Inserting [MASK]": ("mask", "word"),
              "+Inserting Masked Prediction": ("masked_prediction", "word"),
              "+Word Repetition": ("repetition", "word"), "+Sub-word Repetition": ("repetition", "subword")}
#: Table 4 "+ word repetition" = Table 6 "wr": repetition without the momentum queue
REPETITION_ONLY = {"queue_size": 0}


def check_dup_rates(rates: list) -> None:
    bad = [r for r in rates if not isinstance(r, (int, float)) or not 0 <= r <= 1]
    check(not bad, f"dup_rate must be a number in [0, 1], e.g. 0.32; got {bad}")


def check_queue_factors(factors: list) -> None:
    bad = [f for f in factors if not isinstance(f, (int, float)) or f <= 0]
    check(not bad, f"queue sizes are multiples of the batch size > 0, e.g. 2.5; got {bad}")


def check_buckets(specs: list) -> None:
    from ..train.data import parse_length_buckets

    bad = []
    for spec in specs:
        try:
            parse_length_buckets(spec)
        except ValueError:
            bad.append(spec)
    check(not bad, f"bucket settings are a length b (two buckets, <= b and > b) or a-b (<= a, a+1, ..., >= b), as "
                   f"strings, e.g. '5' or '3-8'; got {bad}")


def check_backbones(backbones: list) -> None:
    bad = [b for b in backbones if b not in BACKBONE_LABELS]
    check(not bad, f"unknown backbone(s) {bad}; choose from {', '.join(BACKBONE_LABELS)}")


def rate_label(rate: float) -> str:
    return f"{rate:g}"


def queue_label(factor: float) -> str:
    return f"{factor:g} × batch_size"


def bucket_label(spec: str) -> str:
    return spec.replace("-", "∼")


def table3_rows(backbones: list[str], profile: str) -> list[Row]:
    """STS test in the paper's order: literature rows (the paper's numbers only, not run), SimCSE's released
    checkpoints (the paper quotes them, ♣), and ESimCSE: the released checkpoint and ours."""
    rows = []
    for label in paper_table(3, "esimcse").index:
        backbone = next((b for b, name in BACKBONE_LABELS.items() if label.endswith(f"SimCSE-{name}")), None)
        if backbone is None:
            rows.append(Row(label, unavailable="literature row: the paper's number only, no run behind it here"))
        elif backbone in backbones and label.startswith("SimCSE"):
            rows.append(released_row(RELEASED[backbone][0], label, profile))
        elif backbone in backbones:
            rows += [released_row(RELEASED[backbone][1], label, profile), Row(label, f"esimcse-{backbone}")]
    return rows


def table4_rows(profile: str) -> list[Row]:
    """Components on BERT-base: SimCSE (ours, and the official released model the paper quotes), repetition
    without momentum, momentum without repetition, ESimCSE (ours, and the released checkpoint)."""
    return [Row("SimCSE (official model)", "simcse-bert"),
            released_row(RELEASED["bert"][0], "SimCSE (official model)", profile),
            Row("+ word repetition", "esimcse-bert", REPETITION_ONLY),
            Row("+ momentum contrast", "esimcse-bert", {"length_extension": "none"}),
            Row("ESimCSE", "esimcse-bert"),
            released_row(RELEASED["bert"][1], "ESimCSE", profile)]


def table5_rows(labels: list[str]) -> list[Row]:
    return [Row(label, "esimcse-bert", {"length_extension": EXTENSIONS[label][0], "dup_level": EXTENSIONS[label][1]})
            for label in labels]


def table6_rows(specs: list[str]) -> list[Row]:
    """"wr" (repetition, no queue), then SimCSE batched within length buckets (no repetition, no queue)."""
    return [Row("wr", "esimcse-bert", REPETITION_ONLY)] + [
        Row(bucket_label(spec), "esimcse-bert", {"length_extension": "none", "queue_size": 0, "length_buckets": spec})
        for spec in specs]


def table9_rows(rates: list[float]) -> list[Row]:
    return [Row(rate_label(r), "esimcse-bert", {"dup_rate": r}) for r in rates]


def table10_rows(factors: list[float], profile: str) -> list[Row]:
    """Queue sizes as multiples of the profile's batch size (64 on the paper and cpu profiles: 2.5 x = 160)."""
    batch = build_config("esimcse-bert", profile).batch_size
    return [Row(queue_label(f), "esimcse-bert", {"queue_size": round(f * batch)}) for f in factors]


def table11_rows(profile: str) -> list[Row]:
    """Transfer test: SimCSE (ours and the released model the paper quotes) and ESimCSE (ours and released)."""
    return [Row("SimCSE", "simcse-bert"), released_row(RELEASED["bert"][0], "SimCSE", profile),
            Row("ESimCSE", "esimcse-bert"), released_row(RELEASED["bert"][1], "ESimCSE", profile)]
