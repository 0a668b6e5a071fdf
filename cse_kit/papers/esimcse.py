"""ESimCSE (Wu et al., COLING 2022): which run stands behind each row of its eleven tables, the notebooks' parameter
checks, and the notebooks that reproduce it.

Every trained row is the `esimcse-<backbone>` preset with overrides, so shared rows are trained once: ESimCSE
(Table 4) = sub-word repetition (Table 5) = dup_rate 0.32 (Table 9) = 2.5 x batch_size (Table 10 on the paper
profile). Table 4's "+ word repetition" and Table 6's "wr" are the same run (repetition, no momentum queue), and
Table 5's rows keep the momentum queue (its "+Sub-word Repetition" is the full ESimCSE): our inference, the one
reading under which Table 5's "+Word Repetition" (84.40) and Tables 4/6's 84.09 agree; §5.1-5.3 do not say.

Tables 1, 2, 7 and 8 measure the SimCSE and ESimCSE BERT-base models (ours; the released checkpoints on `paper`):
the length-difference bias on the STS test sets, the paper's five edited sentences, and the new-bias check on
Wikipedia queries. What the paper leaves open there (§1, §5.4 and §5.5 do not say how the difference, the gold
score and the length are read, which model scored Table 2, how Table 8's candidates were recalled) is a
parameter, our reading its default."""

from __future__ import annotations

from ..experiments import Row, check, why_not_run
from ..data.published import paper_table
from ..train.presets import build_config
from .released import released_row

#: notebook -> the ESimCSE artefacts it reproduces, in the paper's order (the report's coverage reads this)
NOTEBOOKS = {
    "esimcse_table1_7_length_bias": ["Table 1", "Table 7"], "esimcse_table2_examples": ["Table 2"],
    "esimcse_table3_sts": ["Table 3"], "esimcse_table4_components": ["Table 4"],
    "esimcse_table5_extension": ["Table 5"], "esimcse_table6_bucketing": ["Table 6"],
    "esimcse_table8_new_bias": ["Table 8"], "esimcse_table9_dup_rate": ["Table 9"],
    "esimcse_table10_queue": ["Table 10"], "esimcse_table11_transfer": ["Table 11"],
}
#: artefact -> the (row, column) of its notebook's comparison the report's coverage matrix quotes
HEADLINES = {
    "Table 3": ("ESimCSE-BERT-base", "Avg."), "Table 4": ("ESimCSE", "STS-B"),
    "Table 5": ("+Sub-word Repetition", "STS-B"), "Table 6": ("wr", "STS-B"), "Table 9": ("0.32", "STS-B"),
    "Table 10": ("2.5 × batch_size", "STS-B"), "Table 11": ("ESimCSE", "Avg."),
    "Table 1": ("1: ≤ 3", "Avg. Similarity Diff"), "Table 7": ("7: ESimCSE (LD ≤ 3)", "Avg."),
    "Table 8": ("ESimCSE", "Sim⟨q,s2⟩"),
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
            rows.append(Row(label, unavailable="literature rows: the paper's numbers only, no run behind them here"))
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


# --- Tables 1, 2, 7, 8: measurements on the trained (and released) SimCSE and ESimCSE models ------------------------
#: the analysed models, BERT-base (the paper: SimCSE's official checkpoint and ESimCSE); Table 2 names none
MODEL_ROWS = {"SimCSE": "simcse-bert", "ESimCSE": "esimcse-bert"}
#: Tables 1/7 leave open how the difference, the gold score and the length are read (§1, §5.4 and their captions):
LENGTH_UNITS = ("words", "tokens")  # whitespace words | the model's sub-word tokens without [CLS]/[SEP]
GOLD_SCALES = ("divide", "minmax")  # gold / 5 on every set | (gold − min) / (max − min): SICK-R's 1-5 onto 0-1
LD_SIDES = (">", "≤")  # the two groups of pairs, by length difference against the threshold
TABLE7_COLUMNS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
TABLE2_TOLERANCE = 0.05  # Table 2's similarities are cosines (0-1), printed with two decimals
#: Table 8: sentences drawn per query when looking for its candidate (our retrieval rule, see new_bias_triples)
CANDIDATE_POOL = 3000


def check_length_bias(threshold, unit: str, gold: str) -> None:
    check(isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0,
          f"threshold must be an integer >= 0 (the paper: 3), got {threshold!r}")
    check(unit in LENGTH_UNITS, f"length_unit must be one of {', '.join(LENGTH_UNITS)}; got {unit!r}")
    check(gold in GOLD_SCALES, f"gold_scale must be one of {', '.join(GOLD_SCALES)}; got {gold!r}")


def check_new_bias(queries, low, high, pool) -> None:
    check(isinstance(queries, int) and queries > 0, f"queries must be a positive integer (the paper: 100), got "
                                                    f"{queries!r}")
    check(all(isinstance(x, (int, float)) for x in (low, high)) and 0 < low <= high <= 1,
          f"need 0 < overlap_low <= overlap_high <= 1 (the paper: 0.13, 0.17), got {low!r}, {high!r}")
    check(isinstance(pool, int) and pool > 0, f"candidate_pool must be a positive integer, got {pool!r}")


def model_rows(profile: str) -> list[Row]:
    """Our SimCSE and ESimCSE runs, each followed by the released checkpoint it stands for (run on `paper`)."""
    return [row for k, (label, preset) in enumerate(MODEL_ROWS.items())
            for row in (Row(label, preset), released_row(RELEASED["bert"][k], label, profile))]


def cosines(encoder, left: list[str], right: list[str]):
    """Cosine similarity of each pair (left[i], right[i])."""
    import numpy as np

    a, b = encoder.encode(left), encoder.encode(right)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _split_label(label: str) -> tuple[str, str]:
    """"SimCSE (released checkpoint)" -> ("SimCSE", " (released checkpoint)")."""
    from ..experiments import RELEASED_SUFFIX

    return label.removesuffix(RELEASED_SUFFIX), (RELEASED_SUFFIX if label.endswith(RELEASED_SUFFIX) else "")


def _measured(rows: list[Row], s, measure):
    """One line per (row, seed) with the columns measure(encoder) returns; rows a profile cannot run stay, `not
    run` with the reason. The records are the rows' training runs (shared with every other table)."""
    from ..experiments import run_rows

    return run_rows(rows, s, (), lambda record: measure(s.store.encoder(record)))


# Tables 1 and 7
def ld_label(model: str, side: str, threshold: int) -> str:
    return f"{model} (LD {side} {threshold})"


def length_bias(encoder, data_dir, threshold: int = 3, unit: str = "words", gold: str = "divide",
                absolute: bool = True) -> dict[str, dict[str, float]]:
    """Tables 1/7: side (">", "≤") -> STS test set -> the mean over its pairs whose length difference is > / ≤
    threshold of |cos − normalised gold| × 100 (cos − gold when not absolute); "Avg." = mean of the seven sets."""
    import numpy as np

    from ..data import load_sts
    from ..experiments import STS_COLUMNS

    def lengths(sentences):
        if unit == "words":
            return np.array([len(x.split()) for x in sentences])
        return np.array([len(ids) for ids in encoder.tokenizer(sentences, add_special_tokens=False)["input_ids"]])

    out = {side: {} for side in LD_SIDES}
    for task, column in STS_COLUMNS.items():
        pairs = load_sts(task, "test", data_dir)
        left, right = [p.sent1 for p in pairs], [p.sent2 for p in pairs]
        low = 1.0 if gold == "minmax" and task == "SICKRelatedness" else 0.0  # SICK-R is scored 1-5, the rest 0-5
        target = (np.array([p.score for p in pairs]) - low) / (5.0 - low)
        diff = cosines(encoder, left, right) - target
        diff = np.abs(diff) if absolute else diff
        apart = np.abs(lengths(left) - lengths(right)) > threshold
        for side, chosen in zip(LD_SIDES, (apart, ~apart)):
            out[side][column] = 100 * float(diff[chosen].mean()) if chosen.any() else float("nan")
    for part in out.values():
        part["Avg."] = float(np.mean(list(part.values())))
    return out


def length_bias_long(rows: list[Row], s, threshold: int, unit: str, gold: str, absolute: bool):
    """Table 7's long form: rows "SimCSE (LD > 3)", "SimCSE (LD ≤ 3)", ... (with the released checkpoints' rows)."""
    import pandas as pd

    def measure(encoder):
        bias = length_bias(encoder, s.store.data_dir, threshold, unit, gold, absolute)
        return {f"{side}|{col}": v for side, values in bias.items() for col, v in values.items()}

    wide = _measured(rows, s, measure)
    lines = []
    for line in wide.to_dict("records"):
        model, suffix = _split_label(line["row"])
        for side in LD_SIDES:
            values = {col: line[f"{side}|{col}"] for col in TABLE7_COLUMNS if f"{side}|{col}" in line}
            lines.append({**{k: line[k] for k in ("seed", "status", "reason", "missing")},
                          "row": ld_label(model, side, threshold) + suffix, **values})
    return pd.DataFrame(lines)


def table1_from_table7(long, threshold: int):
    """Table 1's rows ("> 3", "≤ 3") are SimCSE's Table 7 averages."""
    part = long[long.row.str.startswith("SimCSE (LD ")].copy()
    part["row"] = [label.replace("SimCSE (LD ", "", 1).replace(f" {threshold})", f" {threshold}", 1)
                   for label in part.row]
    return part.rename(columns={"Avg.": "Avg. Similarity Diff"})


def length_gaps(long, threshold: int):
    """The point of Table 7: Avg.(LD ≤ t) − Avg.(LD > t) per model, the paper's (SimCSE 1.84, ESimCSE 0.71, at
    t = 3) beside ours (mean over seeds, and each seed's)."""
    import math
    import re

    import pandas as pd

    from ..data.published import paper_table

    published = paper_table(7, "esimcse")["Avg."]
    ok = long[long.status == "ok"]
    lines = []
    for label in dict.fromkeys(re.sub(r" \(LD [>≤] \d+\)", "", row) for row in ok.row):
        name, suffix = _split_label(label)
        avg = {side: ok[ok.row == ld_label(name, side, threshold) + suffix].set_index("seed")["Avg."]
               for side in LD_SIDES}
        gap = avg["≤"] - avg[">"]
        close, far = ld_label(name, "≤", 3), ld_label(name, ">", 3)
        paper = (float(published[close] - published[far]) if threshold == 3 and close in published.index
                 else math.nan)
        # the paper's gap is a difference of two printed 2-decimal numbers: rounding drops the float noise only
        lines.append({"model": label, "paper": round(paper, 2), "ours": float(gap.mean()),
                      "ours per seed": ", ".join(f"{g:.2f}" for g in gap)})
    return pd.DataFrame(lines)


# Table 2
def table2_sentences() -> list[tuple[str, str, float]]:
    """(method, the edited sentence as plain text, the paper's similarity) of the paper's five examples; markup:
    bold = inserted or repeated (kept), struck = deleted (removed)."""
    import re

    from ..data.published import paper_examples

    def plain(text):
        return " ".join(re.sub(r"~~[^~]*~~", "", text).replace("**", "").split())

    return [(r["method"], plain(r["text"]), r["similarity"]) for r in paper_examples(2, "esimcse")["rows"]]


def example_label(method: str, text: str) -> str:
    return f"{method}: {text}"


def table2_long(rows: list[Row], s):
    """Cosine similarity of each edited sentence of Table 2 to the original (the first), per row and seed."""
    examples = table2_sentences()
    original = examples[0][1]

    def measure(encoder):
        sims = cosines(encoder, [original] * len(examples), [text for _, text, _ in examples])
        return {example_label(method, text): float(v) for (method, text, _), v in zip(examples, sims)}

    return _measured(rows, s, measure)


def table2_comparison(long):
    """The paper's layout: a row per example, a column per model, each cell the paper's similarity | ours."""
    import math

    import pandas as pd

    out = []
    for method, text, paper in table2_sentences():
        example = example_label(method, text)
        for label, group in long.groupby("row", sort=False):
            values = group.loc[group.status == "ok", example].to_numpy(float) if example in group else []
            mean = float(values.mean()) if len(values) else math.nan
            out.append({"row": example, "column": label, "paper": paper, "mean": mean,
                        "std": float(values.std(ddof=1)) if len(values) > 1 else math.nan, "n": len(values),
                        "diff": mean - paper, "tolerance": TABLE2_TOLERANCE,
                        **(why_not_run(group) if not len(values) else {"reason": "", "missing": ""})})
    return pd.DataFrame(out)


# Table 8
def words(sentence: str) -> list[str]:
    """Lower-cased whitespace words without surrounding punctuation (a bare punctuation mark is no word)."""
    import string

    return [w for w in (x.strip(string.punctuation + "“”‘’").lower() for x in sentence.split()) if w]


def overlap(query: str, candidate: str) -> float:
    """Table 8's token overlap, our reading: the share of the candidate's words that occur in the query."""
    found, seen = words(candidate), set(words(query))
    return sum(w in seen for w in found) / len(found) if found else 0.0


def repeat_overlapping(candidate: str, query: str) -> str:
    """s2: the candidate with each word that occurs in the query repeated in place ("looks," -> "looks looks,")."""
    import re

    seen = set(words(query))
    out = []
    for token in candidate.split():
        lead, core, tail = re.match(r"^(\W*)(.*?)(\W*)$", token).groups()
        out.append(f"{lead}{core} {core}{tail}" if words(token) and words(token)[0] in seen else token)
    return " ".join(out)


def new_bias_triples(sentences: list[str], queries: int = 100, low: float = 0.13, high: float = 0.17,
                     seed: int = 0, pool: int = CANDIDATE_POOL) -> list[tuple[str, str, str]]:
    """(q, s1, s2) for `queries` queries: q in a seeded random order of the corpus; s1 = the first of `pool`
    sentences drawn at random (the same generator) whose overlap with q lies in [low, high]; s2 = s1 with its
    overlapping words repeated. A query without such a candidate in its pool is skipped for the next one."""
    import random

    rng = random.Random(seed)
    order = rng.sample(range(len(sentences)), len(sentences))
    out = []
    for qi in order:
        if len(out) == queries:
            break
        q = sentences[qi]
        match = next((sentences[ci] for ci in rng.sample(range(len(sentences)), min(pool, len(sentences)))
                      if ci != qi and low <= overlap(q, sentences[ci]) <= high), None)
        if match is not None:
            out.append((q, match, repeat_overlapping(match, q)))
    return out


def new_bias_long(rows: list[Row], s, triples):
    """Table 8: mean cos(q, s1) and cos(q, s2) × 100 per row and seed."""
    q = [t[0] for t in triples]

    def measure(encoder):
        return {"Sim⟨q,s1⟩": 100 * float(cosines(encoder, q, [t[1] for t in triples]).mean()),
                "Sim⟨q,s2⟩": 100 * float(cosines(encoder, q, [t[2] for t in triples]).mean())}

    return _measured(rows, s, measure)


def repetition_gains(comparison):
    """The paper's point of Table 8: Sim⟨q,s2⟩ − Sim⟨q,s1⟩ per model, paper (+0.68, +0.05) beside ours."""
    import pandas as pd

    wide = {c: comparison[comparison.column == c].set_index("row") for c in ("Sim⟨q,s1⟩", "Sim⟨q,s2⟩")}
    gain = wide["Sim⟨q,s2⟩"][["paper", "mean"]] - wide["Sim⟨q,s1⟩"][["paper", "mean"]]
    return pd.DataFrame({"model": gain.index, "paper": gain["paper"].round(2).to_numpy(),
                         "ours": gain["mean"].to_numpy()})


def corpus_of(profile: str) -> str:
    """The corpus the profile trains on (Wiki1M on `paper`, the local sample elsewhere): Table 8 draws from it."""
    return build_config("esimcse-bert", profile).data
