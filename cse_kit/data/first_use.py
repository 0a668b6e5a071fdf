"""The loaders as the kit calls them: a dataset missing from the data directory is downloaded on first use (progress
bar, checksum, atomic placement), unless the user is offline (CSE_KIT_OFFLINE / HF_HUB_OFFLINE), then read.

This sits above both the loaders (which only read local files) and fetch (which verifies through the loaders)."""

from __future__ import annotations

import functools
import sys

from . import loaders
from .fetch import download
from .loaders import DataError, MissingDatasetError, downloads_allowed


def on_first_use(load):
    @functools.wraps(load)
    def load_or_download(*args, **kwargs):
        try:
            return load(*args, **kwargs)
        except MissingDatasetError as missing:
            if missing.dataset is None or not downloads_allowed():
                raise
            print(f"dataset {missing.dataset} is missing from {missing.root}: downloading it once (set "
                  "CSE_KIT_OFFLINE=1 to stop this)", file=sys.stderr)
            try:
                download([missing.dataset], missing.root)
            except DataError as err:
                raise MissingDatasetError(f"dataset {missing.dataset} is missing from {missing.root} and could not "
                                          f"be downloaded ({err}). {missing.fix}") from None
            return load(*args, **kwargs)
    return load_or_download


load_sts = on_first_use(loaders.load_sts)
load_classification = on_first_use(loaders.load_classification)
load_snli = on_first_use(loaders.load_snli)
snli_triplets = on_first_use(loaders.snli_triplets)
load_corpus = on_first_use(loaders.load_corpus)
load_nli_triplets = on_first_use(loaders.load_nli_triplets)
