"""Every dataset the four papers use: where it lives in the data directory, where it comes from, what it must hold.

Layout of the data directory (the layout SentEval and SimCSE's `SentEval/data` expect, so the original code can be
pointed at the same files for side-by-side checks):

    <data_dir>/downstream/STS/STS12-en-test/...    evaluation sets, SentEval's preprocessing
    <data_dir>/downstream/MR/rt-polarity.pos ...
    <data_dir>/sts_raw/...                         untokenized STS12-16 and STS-B (optional)
    <data_dir>/training/wiki1m_for_simcse.txt      training corpora
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

SIMCSE_HUB_REPO = "princeton-nlp/datasets-for-simcse"
SIMCSE_HUB_URL = f"https://huggingface.co/datasets/{SIMCSE_HUB_REPO}/resolve/main/"

#: md5 and size of each file of the reference copy (SentEval's get_transfer_data.bash output; see docs/data.md).
CHECKSUMS: dict[str, dict] = json.loads(resources.files(__package__).joinpath("checksums.json").read_text())


@dataclass(frozen=True)
class Source:
    """One downloadable artefact. `hub_file` set: a file of the SimCSE Hub dataset repo, fetched with
    huggingface_hub; else a plain URL fetched with pooch. `sha256` None means no published checksum exists;
    the laid-out files are then verified by md5/counts instead."""

    url: str
    kind: str  # "tar", "zip", "file"
    sha256: str | None = None
    hub_file: str | None = None
    convert: str | None = None  # name of a converter in fetch.CONVERTERS, applied after extraction

    @property
    def filename(self) -> str:
        return self.hub_file or self.url.rstrip("/").rsplit("/", 1)[-1]


SENTEVAL_MIRROR = Source(SIMCSE_HUB_URL + "senteval.tar", "tar", hub_file="senteval.tar")
SNLI_OFFICIAL = Source("https://nlp.stanford.edu/projects/snli/snli_1.0.zip", "zip", convert="snli_jsonl")


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # loader family: sts, sts_split, binary, sst, trec, mrpc, snli, corpus, nli
    group: str  # top folder in the data dir
    files: tuple[str, ...]  # paths relative to <data_dir>/<group>
    counts: dict[str, int]  # records per split, the official numbers
    source: Source
    official_urls: tuple[str, ...] = ()
    licence: str = ""
    notes: str = ""
    subsets: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def paths(self, root: Path) -> list[Path]:
        return [root / self.group / f for f in self.files]

    def reference_md5(self, relpath: str) -> str | None:
        entry = CHECKSUMS.get(f"{self.group}/{relpath}")
        return entry["md5"] if entry else None


IXA = "http://ixa2.si.ehu.es/stswiki/images/"
FB_SENTEVAL = "https://dl.fbaipublicfiles.com/senteval/senteval_data/"
STS_LICENCE = "SemEval STS terms (per-year readme/LICENSE files included); research use"


def _sts_year(year: int, subsets: tuple[str, ...], count: int, url: str) -> DatasetSpec:
    folder = f"STS/STS{year}-en-test"
    files = tuple(f"{folder}/STS.{io}.{s}.txt" for s in subsets for io in ("input", "gs"))
    return DatasetSpec(
        name=f"STS{year}", kind="sts", group="downstream", files=files, counts={"test": count},
        source=SENTEVAL_MIRROR, official_urls=(IXA + url,), licence=STS_LICENCE, subsets=subsets,
        extra={"folder": folder},
    )


_DATASETS = [
    _sts_year(12, ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"), 3108,
              "4/40/STS2012-en-test.zip"),
    _sts_year(13, ("FNWN", "headlines", "OnWN"), 1500, "2/2f/STS2013-en-test.zip"),
    _sts_year(14, ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"), 3750,
              "8/8c/STS2014-en-test.zip"),
    _sts_year(15, ("answers-forums", "answers-students", "belief", "headlines", "images"), 3000,
              "d/da/STS2015-en-test.zip"),
    _sts_year(16, ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"), 1186,
              "9/98/STS2016-en-test.zip"),
    DatasetSpec(
        "STSBenchmark", "sts_split", "downstream",
        ("STS/STSBenchmark/sts-train.csv", "STS/STSBenchmark/sts-dev.csv", "STS/STSBenchmark/sts-test.csv"),
        {"train": 5749, "dev": 1500, "test": 1379}, SENTEVAL_MIRROR, (IXA + "4/48/Stsbenchmark.tar.gz",),
        "STS Benchmark LICENSE.txt (each source keeps its licence); research use",
        extra={"columns": (5, 6, 4), "header": False},
    ),
    DatasetSpec(
        "SICKRelatedness", "sts_split", "downstream",
        ("SICK/SICK_train.txt", "SICK/SICK_trial.txt", "SICK/SICK_test_annotated.txt"),
        {"train": 4500, "dev": 500, "test": 4927}, SENTEVAL_MIRROR,
        tuple(f"http://alt.qcri.org/semeval2014/task1/data/uploads/sick_{s}.zip"
              for s in ("train", "trial", "test_annotated")),
        "CC BY-NC-SA 3.0", notes="the trial file is the dev split", extra={"columns": (1, 2, 3), "header": True},
    ),
    DatasetSpec("MR", "binary", "downstream", ("MR/rt-polarity.pos", "MR/rt-polarity.neg"), {"all": 10662},
                SENTEVAL_MIRROR, (FB_SENTEVAL + "datasmall_NB_ACL12.zip",), "research use (Pang & Lee)"),
    DatasetSpec("CR", "binary", "downstream", ("CR/custrev.pos", "CR/custrev.neg"), {"all": 3775},
                SENTEVAL_MIRROR, (FB_SENTEVAL + "datasmall_NB_ACL12.zip",), "research use (Hu & Liu)"),
    # SentEval passes the objective file as the positive class: label 1 = objective.
    DatasetSpec("SUBJ", "binary", "downstream", ("SUBJ/subj.objective", "SUBJ/subj.subjective"), {"all": 10000},
                SENTEVAL_MIRROR, (FB_SENTEVAL + "datasmall_NB_ACL12.zip",), "research use (Pang & Lee)"),
    DatasetSpec("MPQA", "binary", "downstream", ("MPQA/mpqa.pos", "MPQA/mpqa.neg"), {"all": 10606},
                SENTEVAL_MIRROR, (FB_SENTEVAL + "datasmall_NB_ACL12.zip",), "research use (MPQA)"),
    DatasetSpec(
        "SST2", "sst", "downstream",
        ("SST/binary/sentiment-train", "SST/binary/sentiment-dev", "SST/binary/sentiment-test"),
        {"train": 67349, "dev": 872, "test": 1821}, SENTEVAL_MIRROR,
        tuple(f"https://raw.githubusercontent.com/PrincetonML/SIF/master/data/sentiment-{s}"
              for s in ("train", "dev", "test")), "research use (Socher et al.)",
    ),
    DatasetSpec("TREC", "trec", "downstream", ("TREC/train_5500.label", "TREC/TREC_10.label"),
                {"train": 5452, "test": 500}, SENTEVAL_MIRROR,
                ("http://cogcomp.cs.illinois.edu/Data/QA/QC/train_5500.label",
                 "http://cogcomp.cs.illinois.edu/Data/QA/QC/TREC_10.label"), "research use (Li & Roth)"),
    DatasetSpec("MRPC", "mrpc", "downstream", ("MRPC/msr_paraphrase_train.txt", "MRPC/msr_paraphrase_test.txt"),
                {"train": 4076, "test": 1725}, SENTEVAL_MIRROR,
                (FB_SENTEVAL + "msr_paraphrase_train.txt", FB_SENTEVAL + "msr_paraphrase_test.txt"),
                "Microsoft Research Paraphrase Corpus licence (no redistribution)"),
    DatasetSpec(
        "SNLI", "snli", "downstream",
        tuple(f"SNLI/{f}.{s}" for s in ("dev", "test") for f in ("s1", "s2", "labels")),
        {"dev": 9842, "test": 9824}, SNLI_OFFICIAL, (SNLI_OFFICIAL.url,), "CC BY-SA 4.0",
        notes="dev/test only (the train split is not used by any evaluation of the papers). Downloaded copies are "
              "converted from the official jsonl without SentEval's PTB tokenizer, so their md5 differs.",
    ),
    DatasetSpec(
        "Wiki1M", "corpus", "training", ("wiki1m_for_simcse.txt",), {"train": 1000001},
        Source(SIMCSE_HUB_URL + "wiki1m_for_simcse.txt", "file", hub_file="wiki1m_for_simcse.txt"),
        licence="CC BY-SA (Wikipedia)",
        notes="count as in the official training logs (1,000,001 lines -> 15,626 steps at batch 64)",
    ),
    DatasetSpec(
        "Wiki1M-sample", "corpus", "training", ("wiki1m_for_simcse.head11913.txt",), {"train": 11913},
        Source("file:wiki1m_for_simcse.head11913.txt.gz", "file"), licence="CC BY-SA (Wikipedia)",
        notes="the first 11,913 lines of Wiki1M; import it from ../shared/data/wiki1m_prefix (no download source)",
    ),
    DatasetSpec(
        "NLI", "nli", "training", ("nli_for_simcse.csv",), {"train": 275600},
        Source(SIMCSE_HUB_URL + "nli_for_simcse.csv", "file", hub_file="nli_for_simcse.csv"),
        licence="SNLI CC BY-SA 4.0 + MNLI (OANC/CC BY-SA 3.0 mix)",
        notes="SimCSE's SNLI+MNLI triplets: sent0, sent1 (entailment), hard_neg (contradiction)",
    ),
    # ordered corpora for DiffCSE's next-sentence variants (Table 3): one sentence per line in document order, a blank
    # line between documents; the loader pairs each sentence with the next one of its document
    DatasetSpec(
        "WikiText-103", "ordered", "training", ("wikitext103_train_sentences.txt",), {},
        Source("https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip", "zip",
               # size 191,984,949 bytes; the checksum Hugging Face's wikitext loader recorded for this URL
               # (huggingface.co/datasets/Salesforce/wikitext, dataset_infos.json, commit 267ce0b)
               sha256="91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794",
               convert="wikitext_sentences"),
        ("https://huggingface.co/datasets/Salesforce/wikitext",), "CC BY-SA 3.0 (Wikipedia)",
        notes="the train split of WikiText-103 (raw; Merity et al. 2016, 'Pointer Sentinel Mixture Models', Table 1): "
              "Good/Featured Wikipedia articles with their sentence order intact, the same domain as Wiki1M; "
              "articles split at their ' = Title = ' lines (' = = Section = = ' lines and blank lines dropped), "
              "@-@ @,@ @.@ joined back, sentences at '.', '!', '?' before a capital, pieces under 4 words dropped. "
              "Official counts (Merity et al. 2016, Table 1): train 28,475 articles, "
              "103,227,021 tokens; valid 60 articles, 217,646 tokens; test 60 articles, 245,569 tokens; vocabulary "
              "267,735. The kit counts documents (articles with a sentence) and sentence pairs of the train split: "
              "neither is published nor was counted on the real archive here, so `counts` is empty and this "
              "dataset's records are not verified (a download's archive is checked against its sha256; an "
              "import is not).",
        extra={"official": {"train": {"articles": 28475, "tokens": 103227021},
                            "valid": {"articles": 60, "tokens": 217646},
                            "test": {"articles": 60, "tokens": 245569}}},
    ),
    DatasetSpec(
        "Licenses-ordered", "ordered", "training", ("common_licenses_sentences.txt",), {"documents": 14, "pairs": 1276},
        Source("file:///usr/share/common-licenses", "dir", convert="license_sentences"),
        licence="each text's own terms; all allow verbatim copies",
        notes="the English licence texts Debian's base-files package installs in /usr/share/common-licenses "
              "(GPL, LGPL, GFDL, MPL, Apache, Artistic, CC0), in their order: real, ordered English prose "
              "available offline, for the cpu and smoke profiles",
    ),
    DatasetSpec(
        "STS-raw", "sts_split", "sts_raw",
        ("stsbenchmark/sts-train.csv", "stsbenchmark/sts-dev.csv", "stsbenchmark/sts-test.csv"),
        {"train": 5749, "dev": 1500, "test": 1379}, Source(IXA + "4/48/Stsbenchmark.tar.gz", "tar"),
        (IXA + "4/48/Stsbenchmark.tar.gz",), STS_LICENCE,
        notes="untokenized, original-case STS-B (raw STS12-16 come with it in ../shared/data/sts_raw)",
        extra={"columns": (5, 6, 4), "header": False},
    ),
]

REGISTRY: dict[str, DatasetSpec] = {d.name: d for d in _DATASETS}
#: a training source built from registered data, not a dataset of its own: NLI triplets from SNLI dev/test
#: (loaders.load_snli_triplets), the offline stand-in for NLI
SNLI_TRIPLETS = "SNLI-triplets"
#: another: every sentence of the STS and SICK-R files, unlabelled (loaders.load_sts_texts), ConSERT's own
#: unsupervised training data (`--train_data stssick`)
STS_TEXTS = "STS-texts"
BUILT_SOURCES = (SNLI_TRIPLETS, STS_TEXTS)
ORDERED_CORPORA = tuple(d.name for d in _DATASETS if d.kind == "ordered")
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
EVALUATION_SETS = STS_TASKS + TRANSFER_TASKS


class UnknownDatasetError(KeyError):
    def __str__(self) -> str:
        return f"unknown dataset {self.args[0]!r}; known: {', '.join(REGISTRY)}"


def spec(name: str) -> DatasetSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownDatasetError(name) from None


def default_data_dir() -> Path:
    """`CSE_KIT_DATA`, else `data/` in the repository (the folder beside the package)."""
    env = os.environ.get("CSE_KIT_DATA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "data"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    return Path(data_dir).expanduser() if data_dir is not None else default_data_dir()


def is_nli(source: str) -> bool:
    """Whether training data `source` is NLI triplets: the NLI set, SNLI-triplets, or a triplet CSV of one's own."""
    return source in ("NLI", SNLI_TRIPLETS) or source.endswith(".csv")
