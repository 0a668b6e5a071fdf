"""The data layer: a registry of every dataset the papers use, loaders into typed records, download/import/verify; the
papers' published numbers (published.py)."""

from .fetch import ImportRefused, download, import_path, status, verify
from .first_use import (
    load_classification, load_corpus, load_documents, load_nli_triplets, load_sentence_pairs, load_snli,
    load_snli_triplets, load_sts, load_sts_texts, snli_triplets,
)
from .loaders import (
    ALLOW_UNVERIFIED_ENV, DataError, LabelledPair, LabelledSentence, MissingDatasetError, NliTriplet, StsPair,
    UnverifiedDataError, allow_unverified, count_records, unverified_reads,
)
from .registry import (
    EVALUATION_SETS, REGISTRY, STS_TASKS, TRANSFER_TASKS, DatasetSpec, default_data_dir, resolve_data_dir, spec,
)

__all__ = [
    "ALLOW_UNVERIFIED_ENV", "ImportRefused", "UnverifiedDataError", "allow_unverified", "unverified_reads",
    "DataError", "DatasetSpec", "EVALUATION_SETS", "LabelledPair", "LabelledSentence", "MissingDatasetError",
    "NliTriplet", "REGISTRY", "STS_TASKS", "StsPair", "TRANSFER_TASKS", "count_records", "default_data_dir",
    "download", "import_path", "load_classification", "load_corpus", "load_documents", "load_nli_triplets",
    "load_sentence_pairs", "load_snli", "load_snli_triplets", "load_sts", "load_sts_texts",
    "resolve_data_dir", "snli_triplets", "spec", "status", "verify",
]
