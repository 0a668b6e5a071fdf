"""A researcher's own evaluation data under the papers' protocol: an STS-style CSV (sentence1, sentence2, score:
the Spearman ×100 of the pairs' cosines, as STS-B test), or a classification CSV (text, label: SentEval's logistic
regression with its 10-fold cross-validation and inner model selection, as MR, CR, SUBJ and MPQA). Named
`name=path.csv` beside the kit's tasks (`cse-kit eval --tasks sts,mine=pairs.csv`); a record holds its result
under the file's checksum, so an edited file is evaluated again."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..data import DataError, LabelledSentence, StsPair
from ..data.loaders import md5_file

STS_COLUMNS = ("sentence1", "sentence2", "score")
CLASSIFICATION_COLUMNS = ("text", "label")
KINDS = {"sts": STS_COLUMNS, "classification": CLASSIFICATION_COLUMNS}
#: the fewest rows a label can have: 10 outer folds, and 10 inner folds in the 9/10 each outer fold trains on
MIN_PER_LABEL = 12


@dataclass(frozen=True)
class UserTask:
    """An evaluation task from a CSV file; `kind` follows from its header."""

    name: str
    path: str

    @property
    def md5(self) -> str:
        return md5_file(Path(self.path))

    @property
    def evaluation(self) -> str:
        """Its name in a record's metrics: the task's name and the file's checksum."""
        return f"user:{self.name}:{self.md5[:16]}"

    @property
    def kind(self) -> str:
        return csv_kind(Path(self.path))


def parse_user_task(spec: str) -> UserTask:
    """`name=path.csv` as a UserTask, the file checked now (one line naming the file and the fix)."""
    name, _, path = spec.partition("=")
    name, path = name.strip(), path.strip()
    if not name or not path or any(c in name for c in ":,"):
        raise DataError(f"a task of your own is name=path.csv (a name without ':' or ','), got {spec!r}")
    task = UserTask(name, str(Path(path).expanduser().resolve()))
    read_task(task)  # a bad file fails here, before any model is loaded
    return task


def _open(path: Path):
    """The CSV file, opened for csv; one line where there is none."""
    if not path.is_file():
        raise DataError(f"{path}: no such file; give the path of a CSV with a header row "
                        f"({', '.join(STS_COLUMNS)} or {', '.join(CLASSIFICATION_COLUMNS)})")
    return path.open(newline="", encoding="utf-8")


def csv_kind(path: Path) -> str:
    """"sts" or "classification", from the CSV's header (its first row only is read)."""
    with _open(path) as handle:
        header = [c.strip() for c in next(csv.reader(handle), [])]
    for kind, columns in KINDS.items():
        if set(columns) <= set(header):
            return kind
    raise DataError(f"{path}: its header is {', '.join(header) or 'empty'}; an STS task needs the columns "
                    f"{', '.join(STS_COLUMNS)}, a classification task {', '.join(CLASSIFICATION_COLUMNS)}")


def _data_rows(path: Path) -> list[dict]:
    """The CSV's rows under its header; none is refused."""
    with _open(path) as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise DataError(f"{path}: no rows under its header; add one row per pair or sentence")
    return rows


def _text(path: Path, line: int, row: dict, column: str) -> str:
    value = (row.get(column) or "").strip()
    if not value:
        raise DataError(f"{path}, row {line}: {column} is empty; every row needs a {column}")
    return value


def load_user_pairs(path: Path) -> list[StsPair]:
    """An STS-style CSV's pairs (subset "user"); row numbers in errors count the header as row 1."""
    path = Path(path)
    rows = _data_rows(path)
    pairs = []
    for line, row in enumerate(rows, start=2):
        text = (row.get("score") or "").strip()
        try:
            score = float(text)
        except ValueError:
            raise DataError(f"{path}, row {line}: score {text!r} is not a number; give each pair a numeric "
                            "similarity (e.g. 0 to 5)") from None
        pairs.append(StsPair(_text(path, line, row, "sentence1"), _text(path, line, row, "sentence2"), score, "user"))
    if len(pairs) < 2 or len({p.score for p in pairs}) < 2:
        raise DataError(f"{path}: {len(pairs)} pairs with {len({p.score for p in pairs})} distinct scores; a "
                        "Spearman correlation needs at least two pairs with different scores")
    return pairs


def label_ids(labels: list[str]) -> dict[str, int]:
    """Each label's class id: integers keep their order (0/1 stay 0/1), other labels are sorted."""
    distinct = set(labels)
    try:
        ordered = sorted(distinct, key=int)
    except ValueError:
        ordered = sorted(distinct)
    return {label: i for i, label in enumerate(ordered)}


def load_user_sentences(path: Path) -> list[LabelledSentence]:
    """A classification CSV's labelled sentences, labels as class ids (label_ids)."""
    path = Path(path)
    rows = _data_rows(path)
    texts = [(_text(path, line, row, "text"), _text(path, line, row, "label")) for line, row in
             enumerate(rows, start=2)]
    ids = label_ids([label for _, label in texts])
    if len(ids) < 2:
        raise DataError(f"{path}: all {len(texts)} rows are labelled {next(iter(ids))!r}; a classifier needs at "
                        "least two labels")
    counts = Counter(label for _, label in texts)
    few = [label for label, n in counts.items() if n < MIN_PER_LABEL]
    if few:
        raise DataError(f"{path}: label {few[0]!r} has {counts[few[0]]} rows; each label needs at least "
                        f"{MIN_PER_LABEL} (SentEval's 10-fold cross-validation, each training part split 10-fold "
                        "again to pick the classifier's regularisation)")
    return [LabelledSentence(text, ids[label]) for text, label in texts]


def read_task(task: UserTask) -> list:
    path = Path(task.path)
    return load_user_pairs(path) if task.kind == "sts" else load_user_sentences(path)


def evaluate_user_task(encoder, task: UserTask, seed: int = 1111) -> dict:
    """An STS task: {"spearman", "pearson", "n", "kind"}; a classification task: SentEval's MR-style result
    ({"devacc", "acc", "ndev", "ntest", "nclasses", "kind"}) in the test configuration."""
    from .sts import correlations, pair_scores
    from .transfer import TaskData, _ntok, evaluate_transfer_task

    records = read_task(task)
    if task.kind == "sts":
        return {**correlations(*pair_scores(encoder, records)), "n": len(records), "kind": "sts", "file": task.path}
    ordered = sorted(records, key=lambda r: (_ntok(r.text), r.label))  # SentEval's stable sort, as MR's
    nclasses = len({r.label for r in records})
    result = evaluate_transfer_task(encoder, TaskData(task.name, {"all": ordered}), "test", seed, nclasses=nclasses)
    return {**result, "nclasses": nclasses, "kind": "classification", "file": task.path}


def headline(result: dict) -> float:
    return result["spearman"] if result["kind"] == "sts" else result["acc"]
