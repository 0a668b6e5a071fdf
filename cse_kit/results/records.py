"""A record as the results store writes it: its fields, its content digest, and reading one from its file. A record
that is not JSON cannot be one the store wrote (its writes are atomic): it was replaced or damaged, and is refused
(UnreadableRecord), never read or replaced, until someone looks at it; a JSON record of the wrong shape or that fails
its digest (edited by hand) is CorruptRecord."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from ..environment import PACKAGE


def content_digest(record: dict) -> str:
    """sha256 of a record's content without its own digest (canonical JSON, as json round-trips it)."""
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


#: field -> type every record has; trained records also have TRAINED_FIELDS
RECORD_FIELDS = {"key": str, "subject": dict, "metrics": dict, "timings": dict, "model_dir": str, "pooler": str,
                 "digest": str}
TRAINED_FIELDS = {"config": dict, "train": dict, "dev_curve": list, "train_curve": list}


class CorruptRecord(ValueError):
    pass


class UnreadableRecord(ValueError):
    """A record file that is not JSON: replaced (by a pickle, say) or damaged on disk, never written so by the store."""

    def __init__(self, path: Path):
        super().__init__(f"result record {path} is not JSON, so the results store did not write it (its writes are "
                         f"atomic): someone replaced it or the disk damaged it, and it is never read; look at it, then "
                         f"move it out of {path.parent} or delete it, and run again to recompute it")


def is_trained(record: dict) -> bool:
    return isinstance(record.get("subject"), dict) and record["subject"].get("kind") == "trained"


def check_record(record, key: str) -> None:
    """Raise CorruptRecord unless record is what this store writes for key: its shape, and its digest."""
    if not isinstance(record, dict):
        raise CorruptRecord(f"it is a JSON {type(record).__name__}, not a record")
    fields = {**RECORD_FIELDS, **(TRAINED_FIELDS if is_trained(record) else {})}
    wrong = [f for f, kind in fields.items() if not isinstance(record.get(f), kind)]
    if wrong:
        raise CorruptRecord(f"it lacks or mistypes {', '.join(wrong)}")
    if record["key"] != key:
        raise CorruptRecord(f"it holds key {record['key']}, not {key}")
    if record["digest"] != content_digest(record):
        raise CorruptRecord("its content does not match its digest (edited after it was written)")


def read_record(path: Path):
    """The JSON in a record file (UnreadableRecord where there is none)."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UnreadableRecord(path) from None


def read_checked(path: Path) -> dict | None:
    """The record in path, checked against its file name; None where it is missing, unreadable or corrupt (for
    listings, which leave damaged records to the lookups that set them aside)."""
    try:
        record = read_record(path)
        check_record(record, path.stem)
    except (OSError, ValueError):
        return None
    return record


def default_results_dir() -> Path:
    """`CSE_KIT_RESULTS`, else reports/results in the repository."""
    env = os.environ.get("CSE_KIT_RESULTS")
    return Path(env).expanduser() if env else PACKAGE.parent / "reports" / "results"


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PACKAGE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
