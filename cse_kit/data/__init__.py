"""The data layer: a registry of every dataset the papers use, loaders into typed records, download/import/verify."""

from .fetch import download, import_path, status, verify
from .loaders import (
    DataError, LabelledPair, LabelledSentence, MissingDatasetError, NliTriplet, StsPair, count_records,
    load_classification, load_corpus, load_documents, load_nli_triplets, load_sentence_pairs, load_snli, load_sts,
    snli_triplets,
)
from .registry import (
    EVALUATION_SETS, REGISTRY, STS_TASKS, TRANSFER_TASKS, DatasetSpec, default_data_dir, resolve_data_dir, spec,
)

__all__ = [
    "DataError", "DatasetSpec", "EVALUATION_SETS", "LabelledPair", "LabelledSentence", "MissingDatasetError",
    "NliTriplet", "REGISTRY", "STS_TASKS", "StsPair", "TRANSFER_TASKS", "count_records", "default_data_dir",
    "download", "import_path", "load_classification", "load_corpus", "load_documents", "load_nli_triplets",
    "load_sentence_pairs", "load_snli", "load_sts",
    "resolve_data_dir", "snli_triplets", "spec", "status", "verify",
]
