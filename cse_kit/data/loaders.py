"""Loaders that read the registry's files into plain typed records.

Text is read exactly as SentEval reads it (its encoding, its columns, whitespace-split then re-joined with single
spaces, which is what the SimCSE-family batchers feed the tokenizer), so that our numbers are the protocol's.
Every parse error names file:line and what was expected.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from .registry import STS_TASKS, DatasetSpec, resolve_data_dir, spec


class DataError(ValueError):
    """Bad or missing data; the message says how to fix it."""


class MissingDatasetError(DataError, FileNotFoundError):
    def __init__(self, message: str, *, dataset: str | None = None, root: Path | None = None, fix: str = ""):
        super().__init__(message)
        self.dataset, self.root, self.fix = dataset, root, fix


class UnverifiedDataError(DataError):
    """A data file that differs from the registry's reference copy (truncated, edited, corrupt)."""


#: Set to 1 to read data files that fail verification anyway (warned about, and recorded with every result).
ALLOW_UNVERIFIED_ENV = "CSE_KIT_ALLOW_UNVERIFIED_DATA"
#: Files placed by `cse-kit data download` whose md5 differs from the reference copy by design (the SNLI
#: conversion), with the md5 they had when placed: still verified, and an edit after placement is still caught.
ACCEPTED = ".cse_kit_accepted.json"
CHUNK = 1 << 20


def allow_unverified() -> bool:
    return os.environ.get(ALLOW_UNVERIFIED_ENV, "").lower() in ("1", "true", "yes", "on")


def md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def accepted_md5s(root: Path) -> dict[str, str]:
    path = Path(root) / ACCEPTED
    return json.loads(path.read_text()) if path.is_file() else {}


def checksum_problems(ds: DatasetSpec, root: Path) -> list[str]:
    """One line per file of ds whose md5 is neither the reference copy's nor one accepted at download."""
    accepted = accepted_md5s(root)
    problems = []
    for rel, path in zip(ds.files, ds.paths(root)):
        ref = ds.reference_md5(rel)
        if ref is None:
            continue
        got = md5_file(path)
        if got != ref and got != accepted.get(f"{ds.group}/{rel}"):
            problems.append(f"{path}: md5 differs from the reference copy (truncated, corrupt, edited or a "
                            "differently preprocessed copy)")
    return problems


def count_problems(ds: DatasetSpec, counts: dict[str, int]) -> list[str]:
    return [f"{ds.name} {split}: {counts[split]} records, expected {expected}"
            for split, expected in ds.counts.items() if split in counts and counts[split] != expected]


#: (dataset, files with their size and mtime) -> problems: each file is checked once per process, again if it changes
_CHECKED: dict[tuple, list[str]] = {}
#: dataset -> problems of the files read anyway under CSE_KIT_ALLOW_UNVERIFIED_DATA (recorded with results)
_READ_UNVERIFIED: dict[str, list[str]] = {}
_checking: set[str] = set()  # counting records reads the dataset through the loaders: do not recurse
#: (dataset files' stamp, split) -> its records: every run a notebook evaluates reads the same STS and transfer files
#: (parsing the STS test sets was 0.5 s of a 5 s smoke run); parsed again when a file changes
_PARSED: dict[tuple, list] = {}


def _stamp(ds: DatasetSpec, folder: Path) -> tuple:
    """The dataset's files (under its folder, `dataset_root`'s) with their size and modification time."""
    return (ds.name, *((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (folder / f for f in ds.files)))


def _parsed_once(ds: DatasetSpec, folder: Path, split, parse) -> list:
    """parse()'s records of a verified dataset split, parsed once per process while its files are unchanged (a new
    list each call: callers may reorder theirs)."""
    key = (_stamp(ds, folder), split)
    if key not in _PARSED:
        _PARSED[key] = parse()
    return list(_PARSED[key])


def _check_dataset(ds: DatasetSpec, root: Path) -> None:
    """Refuse a dataset whose files are not the registry's: md5 where the registry has one, else record counts."""
    if ds.name in _checking:
        return
    stamp = _stamp(ds, root / ds.group)
    if stamp not in _CHECKED:
        problems = checksum_problems(ds, root)
        if any(ds.reference_md5(rel) is None for rel in ds.files):
            try:
                problems += count_problems(ds, count_records(ds.name, root))
            except DataError as e:
                problems.append(str(e))
        _CHECKED[stamp] = problems
    problems = _CHECKED[stamp]
    if not problems:
        return
    if allow_unverified():
        if ds.name not in _READ_UNVERIFIED:
            warnings.warn(f"reading {ds.name} although it failed verification ({ALLOW_UNVERIFIED_ENV} is set): "
                          + "; ".join(problems), stacklevel=4)
        _READ_UNVERIFIED[ds.name] = problems
        return
    fix = _fix_command(ds, "a good copy")
    raise UnverifiedDataError(
        f"dataset {ds.name} in {root} failed verification, refusing to read it: {'; '.join(problems)}. Fix: {fix} "
        f"to replace it; to read it anyway, set {ALLOW_UNVERIFIED_ENV}=1 (recorded with every result).")


def unverified_reads() -> dict[str, list[str]]:
    """Datasets this process read although they failed verification, with their problems."""
    return dict(_READ_UNVERIFIED)


@dataclass(frozen=True, slots=True)
class StsPair:
    sent1: str
    sent2: str
    score: float
    subset: str  # STS12-16: the topic subset; STS-B/SICK-R: the split


@dataclass(frozen=True, slots=True)
class LabelledSentence:
    text: str
    label: int


@dataclass(frozen=True, slots=True)
class LabelledPair:
    sent1: str
    sent2: str
    label: int


@dataclass(frozen=True, slots=True)
class NliTriplet:
    anchor: str
    positive: str
    negative: str


TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
SNLI_CLASSES = {"entailment": 0, "neutral": 1, "contradiction": 2}


def normalize(text: str) -> str:
    """SentEval splits on whitespace and the batchers re-join with one space."""
    return " ".join(text.split())


def _lines(path: Path, encoding: str = "utf-8") -> list[str]:
    try:
        with open(path, encoding=encoding, newline="") as f:
            return f.read().splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid {encoding} text ({e.reason} at byte {e.start}); "
                        f"the file is corrupt: re-import or re-download it") from None


def _fields(path: Path, lineno: int, line: str, need: int, what: str) -> list[str]:
    cols = line.strip().split("\t")
    if len(cols) < need:
        raise DataError(f"{path}:{lineno}: expected {what} ({need} tab-separated columns), got {len(cols)}: "
                        f"{line[:80]!r}")
    return cols


def _float(path: Path, lineno: int, value: str, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}:{lineno}: expected a number for {what}, got {value!r}") from None


def _int(path: Path, lineno: int, value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DataError(f"{path}:{lineno}: expected an integer {what}, got {value!r}") from None


def downloads_allowed() -> bool:
    """Missing datasets are downloaded on first use unless the user is offline (CSE_KIT_OFFLINE=1, or the Hugging
    Face switch HF_HUB_OFFLINE=1 that the tests and offline users already set)."""
    off = ("1", "true", "yes", "on")
    return not any(os.environ.get(v, "").lower() in off for v in ("CSE_KIT_OFFLINE", "HF_HUB_OFFLINE"))


def _fix_command(ds: DatasetSpec, copy: str) -> str:
    """The command that places the dataset: an import of its file when it has no download source (the Wiki1M
    sample), else a download or an import."""
    if ds.source.url.startswith("file:"):
        return f"`cse-kit data import PATH/{ds.source.url[len('file:'):]}` ({copy}; it has no download source)"
    return f"`cse-kit data download {ds.name}` (needs internet) or `cse-kit data import PATH` with {copy} of its archive"


def dataset_root(ds: DatasetSpec, data_dir=None) -> Path:
    """The folder holding the dataset's files, verified; MissingDatasetError (naming the command that fixes it) when
    they are not there. The public loaders of `cse_kit.data` download a missing dataset on first use."""
    root = resolve_data_dir(data_dir)
    missing = [p for p in ds.paths(root) if not p.is_file()]
    if missing:
        fix = f"Fix: {_fix_command(ds, 'a local copy')}{'' if data_dir is None else f', adding --data-dir {root}'}."
        off = "" if downloads_allowed() else " and downloads are off (CSE_KIT_OFFLINE / HF_HUB_OFFLINE)"
        raise MissingDatasetError(f"dataset {ds.name} is missing from {root} (no {missing[0]}){off}. {fix}",
                                  dataset=ds.name, root=root, fix=fix)
    _check_dataset(ds, root)
    return root / ds.group


# --- STS ---------------------------------------------------------------------------------------------------------

def _sts_subset(folder: Path, subset: str, unscored: bool = False) -> list[StsPair]:
    """The subset's pairs with a gold score (SentEval's); unscored: every pair, those without one scored nan."""
    inp, gs = folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"
    pairs, golds = _lines(inp), _lines(gs)
    if len(pairs) != len(golds):
        raise DataError(f"{inp} has {len(pairs)} lines but {gs} has {len(golds)}; one of them is truncated: "
                        "re-import or re-download the dataset")
    out = []
    for lineno, (line, gold) in enumerate(zip(pairs, golds), 1):
        if gold.strip() == "" and not unscored:  # SentEval drops pairs without a gold score
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise DataError(f"{inp}:{lineno}: expected two tab-separated sentences, got {line[:80]!r}")
        score = _float(gs, lineno, gold, "the gold score") if gold.strip() else float("nan")
        out.append(StsPair(normalize(cols[0]), normalize(cols[1]), score, subset))
    return out


def _sts_split_file(path: Path, columns: tuple[int, int, int], header: bool, split: str) -> list[StsPair]:
    a, b, score = columns
    out = []
    for lineno, line in enumerate(_lines(path), 1):
        if header and lineno == 1:
            continue
        cols = _fields(path, lineno, line, max(columns) + 1, "a sentence pair with its score")
        out.append(StsPair(normalize(cols[a]), normalize(cols[b]), _float(path, lineno, cols[score], "the score"),
                           split))
    return out


def load_sts(name: str, split: str | None = None, data_dir=None) -> list[StsPair]:
    """STS pairs. STS12-16: all topic subsets (split "test" or None). STS-B, SICK-R: split train/dev/test."""
    ds = spec(name)
    root = dataset_root(ds, data_dir)
    if ds.kind == "sts":
        if split not in (None, "test"):
            raise DataError(f"{name} has only a test split, not {split!r}")
        folder = root / ds.extra["folder"]
        return _parsed_once(ds, root, split, lambda: [p for s in ds.subsets for p in _sts_subset(folder, s)])
    if ds.kind != "sts_split":
        raise DataError(f"{name} is not an STS dataset")
    splits = tuple(ds.counts)
    if split not in splits:
        raise DataError(f"{name}: split must be one of {', '.join(splits)}, not {split!r}")
    path = root / ds.files[splits.index(split)]
    return _parsed_once(ds, root, split,
                        lambda: _sts_split_file(path, ds.extra["columns"], ds.extra["header"], split))


def load_sts_texts(data_dir=None) -> list[str]:
    """Every sentence of the STS and SICK-R files, unlabelled, as ConSERT's unsupervised recipe trains on them
    (`--train_data stssick --no_pair`, yym6472/ConSERT data_utils.py:203-219): each pair's two sentences of STS12-16's
    input files, the pairs without a gold score included (:62-79, 142-167), of STS-B's train, dev and test
    (:169-194) and of SICK's train, trial and test (:196-219, SICK-R's three splits): 89,192 sentences."""
    pairs = []
    for name in STS_TASKS:
        ds = spec(name)
        root = dataset_root(ds, data_dir)
        if ds.kind == "sts":
            folder = root / ds.extra["folder"]
            pairs += [p for subset in ds.subsets for p in _sts_subset(folder, subset, unscored=True)]
        else:
            pairs += [p for split in ds.counts for p in load_sts(name, split, data_dir)]
    return [text for p in pairs for text in (p.sent1, p.sent2)]


# --- classification ----------------------------------------------------------------------------------------------

def _binary(root: Path, ds: DatasetSpec) -> list[LabelledSentence]:
    pos, neg = (_lines(root / f, encoding="latin-1") for f in ds.files)
    return [LabelledSentence(normalize(t), 1) for t in pos] + [LabelledSentence(normalize(t), 0) for t in neg]


def _sst(path: Path) -> list[LabelledSentence]:
    out = []
    for lineno, line in enumerate(_lines(path), 1):
        cols = _fields(path, lineno, line, 2, "a sentence and its 0/1 label")
        out.append(LabelledSentence(normalize(cols[0]), _int(path, lineno, cols[1], "label")))
    return out


def _trec(path: Path) -> list[LabelledSentence]:
    out = []
    for lineno, line in enumerate(_lines(path, encoding="latin-1"), 1):
        target, sep, rest = line.strip().partition(":")
        words = rest.split(" ", 1)
        if not sep or target not in TREC_CLASSES or len(words) < 2:
            raise DataError(f"{path}:{lineno}: expected 'CLASS:fine question' with CLASS in "
                            f"{'/'.join(TREC_CLASSES)}, got {line[:80]!r}")
        out.append(LabelledSentence(normalize(words[1]), TREC_CLASSES[target]))
    return out


def _mrpc(path: Path) -> list[LabelledPair]:
    out = []
    for lineno, line in enumerate(_lines(path), 1):
        if lineno == 1:
            continue
        cols = _fields(path, lineno, line, 5, "Quality, #1 ID, #2 ID, #1 String, #2 String")
        out.append(LabelledPair(normalize(cols[3]), normalize(cols[4]), _int(path, lineno, cols[0], "label")))
    return out


def load_classification(name: str, split: str | None = None, data_dir=None):
    """Labelled sentences (MR/CR/SUBJ/MPQA: split "all"; SST2: train/dev/test; TREC: train/test) or labelled
    sentence pairs (MRPC: train/test; label 1 = paraphrase)."""
    ds = spec(name)
    root = dataset_root(ds, data_dir)
    splits = tuple(ds.counts)
    split = split or (splits[0] if len(splits) == 1 else None)
    if split not in splits:
        raise DataError(f"{name}: split must be one of {', '.join(splits)}, not {split!r}")
    if ds.kind == "binary":
        return _parsed_once(ds, root, split, lambda: _binary(root, ds))
    path = root / ds.files[splits.index(split)]
    readers = {"sst": _sst, "trec": _trec, "mrpc": _mrpc}
    if ds.kind not in readers:
        raise DataError(f"{name} is not a classification dataset")
    return _parsed_once(ds, root, split, lambda: readers[ds.kind](path))


# --- SNLI and training data --------------------------------------------------------------------------------------

def load_snli(split: str, data_dir=None) -> list[LabelledPair]:
    """SNLI dev/test pairs; label 0 entailment, 1 neutral, 2 contradiction."""
    ds = spec("SNLI")
    root = dataset_root(ds, data_dir)
    if split not in ds.counts:
        raise DataError(f"SNLI: split must be one of {', '.join(ds.counts)}, not {split!r}")
    s1, s2, labels = (_lines(root / "SNLI" / f"{f}.{split}") for f in ("s1", "s2", "labels"))
    if not len(s1) == len(s2) == len(labels):
        raise DataError(f"{root / 'SNLI'}: s1/s2/labels.{split} have {len(s1)}/{len(s2)}/{len(labels)} lines; "
                        "a file is truncated: re-import or re-download SNLI")
    out = []
    for lineno, (a, b, lab) in enumerate(zip(s1, s2, labels), 1):
        if lab not in SNLI_CLASSES:
            raise DataError(f"{root / 'SNLI' / f'labels.{split}'}:{lineno}: expected one of "
                            f"{'/'.join(SNLI_CLASSES)}, got {lab!r}")
        out.append(LabelledPair(normalize(a), normalize(b), SNLI_CLASSES[lab]))
    return out


def snli_triplets(split: str, data_dir=None) -> list[NliTriplet]:
    """(premise, entailed hypothesis, contradicted hypothesis) for each premise that has both, in file order:
    the shape of SimCSE's nli_for_simcse.csv, so NLI-based methods can run offline at small scale."""
    by_premise: dict[str, dict[int, str]] = {}
    for pair in load_snli(split, data_dir):
        by_premise.setdefault(pair.sent1, {}).setdefault(pair.label, pair.sent2)
    return [NliTriplet(p, h[0], h[2]) for p, h in by_premise.items() if 0 in h and 2 in h]


#: Where SNLI dev/test come from offline: SentEval's downstream archive of ../shared/data.
DOWNSTREAM_ARCHIVE = "../shared/data/senteval/senteval_downstream.tar.gz"


def load_snli_triplets(data_dir=None) -> list[NliTriplet]:
    """Training source "SNLI-triplets", the offline stand-in for SimCSE's nli_for_simcse.csv (which needs the Hub):
    `snli_triplets` of SNLI dev, then of SNLI test. Rule, per split in file order: each premise (s1, by its
    normalized text, in order of first appearance) that has at least one entailment and one contradiction
    hypothesis gives one triplet (premise, its first entailment hypothesis, its first contradiction hypothesis);
    premises lacking either are skipped. A premise in both splits gives one triplet per split. 5,864 triplets
    (2,943 dev + 2,921 test) from the SentEval copy."""
    ds = spec("SNLI")
    try:
        return [t for split in ds.counts for t in snli_triplets(split, data_dir)]
    except MissingDatasetError as e:
        where = "" if data_dir is None else f" --data-dir {e.root}"
        fix = (f"Fix: `cse-kit data import {DOWNSTREAM_ARCHIVE}{where}` (offline) or `cse-kit data download SNLI` "
               "(needs internet).")
        raise MissingDatasetError(f"SNLI-triplets are built from SNLI dev/test, but {str(e).removesuffix(e.fix)}"
                                  f"{fix}", dataset=e.dataset, root=e.root, fix=fix) from None


def load_corpus(name: str = "Wiki1M", data_dir=None, path: str | os.PathLike | None = None) -> list[str]:
    """One training sentence per line (raw text, not normalized: training tokenizes it as is)."""
    file = Path(path) if path is not None else dataset_root(spec(name), data_dir) / spec(name).files[0]
    return _lines(file)


def load_documents(name: str, data_dir=None, path: str | os.PathLike | None = None) -> list[list[str]]:
    """An ordered corpus: its documents, each a list of sentences in their order."""
    file = Path(path) if path is not None else dataset_root(spec(name), data_dir) / spec(name).files[0]
    documents, current = [], []
    for line in _lines(file) + [""]:
        if line.strip():
            current.append(line)
        elif current:
            documents.append(current)
            current = []
    return documents


def load_sentence_pairs(name: str, data_dir=None, path: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """(sentence, next sentence) of an ordered corpus, every consecutive pair within a document, in corpus order."""
    return [pair for doc in load_documents(name, data_dir, path) for pair in zip(doc, doc[1:])]


def load_nli_triplets(name: str = "NLI", data_dir=None, path: str | os.PathLike | None = None) -> list[NliTriplet]:
    """SimCSE's nli_for_simcse.csv: header sent0,sent1,hard_neg."""
    file = Path(path) if path is not None else dataset_root(spec(name), data_dir) / spec(name).files[0]
    with open(file, encoding="utf-8", newline="") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is None or len(header) < 3:
            raise DataError(f"{file}:1: expected the header sent0,sent1,hard_neg, got {header!r}")
        out = []
        for row in rows:
            if len(row) < 3:
                raise DataError(f"{file}:{rows.line_num}: expected 3 columns (anchor, positive, hard negative), "
                                f"got {len(row)}")
            out.append(NliTriplet(row[0], row[1], row[2]))
    return out


def count_records(name: str, data_dir=None) -> dict[str, int]:
    """Records per split, counted the way the loaders (and SentEval) count them (the files are not verified
    first: counting is part of verifying them)."""
    if name in _checking:
        return _count_records(spec(name), data_dir)
    _checking.add(name)
    try:
        return _count_records(spec(name), data_dir)
    finally:
        _checking.discard(name)


def _count_records(ds: DatasetSpec, data_dir) -> dict[str, int]:
    name = ds.name
    if ds.kind in ("sts", "sts_split"):
        return {s: len(load_sts(name, s, data_dir)) for s in ds.counts}
    if ds.kind in ("binary", "sst", "trec", "mrpc"):
        return {s: len(load_classification(name, s, data_dir)) for s in ds.counts}
    if ds.kind == "snli":
        return {s: len(load_snli(s, data_dir)) for s in ds.counts}
    if ds.kind == "corpus":
        return {"train": len(load_corpus(name, data_dir))}
    if ds.kind == "ordered":
        documents = load_documents(name, data_dir)
        return {"documents": len(documents), "pairs": sum(len(d) - 1 for d in documents)}
    return {"train": len(load_nli_triplets(name, data_dir))}
