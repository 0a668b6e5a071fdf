"""The loaders as the kit calls them: a dataset missing from the data directory is downloaded on first use (progress
bar, checksum, atomic placement), unless the user is offline (CSE_KIT_OFFLINE / HF_HUB_OFFLINE), then read.

This sits above both the loaders (which only read local files) and fetch (which verifies through the loaders)."""

from __future__ import annotations

import functools
import sys

from . import loaders
from .fetch import download
from .loaders import DataError, MissingDatasetError, downloads_allowed
from .registry import spec


def on_first_use(load):
    @functools.wraps(load)
    def load_or_download(*args, **kwargs):
        try:
            return load(*args, **kwargs)
        except MissingDatasetError as missing:
            if missing.dataset is None or not (downloads_allowed() or is_local(missing.dataset)):
                raise
            how = (f"copying it from {spec(missing.dataset).source.url}" if is_local(missing.dataset) else
                   "downloading it once (set CSE_KIT_OFFLINE=1 to stop this)")
            print(f"dataset {missing.dataset} is missing from {missing.root}: {how}", file=sys.stderr)
            try:
                download([missing.dataset], missing.root)
            except DataError as err:
                raise MissingDatasetError(f"dataset {missing.dataset} is missing from {missing.root} and could not "
                                          f"be downloaded ({err}). {missing.fix}") from None
            return load(*args, **kwargs)
    return load_or_download


def is_local(name: str) -> bool:
    """A dataset whose source is a folder of this machine (file:///...): placing it is no download, offline too."""
    return spec(name).source.url.startswith("file:///")


load_sts = on_first_use(loaders.load_sts)
load_sts_texts = on_first_use(loaders.load_sts_texts)
load_classification = on_first_use(loaders.load_classification)
load_snli = on_first_use(loaders.load_snli)
snli_triplets = on_first_use(loaders.snli_triplets)
load_snli_triplets = on_first_use(loaders.load_snli_triplets)
load_corpus = on_first_use(loaders.load_corpus)
load_nli_triplets = on_first_use(loaders.load_nli_triplets)
load_documents = on_first_use(loaders.load_documents)
load_sentence_pairs = on_first_use(loaders.load_sentence_pairs)
