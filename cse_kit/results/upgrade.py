"""A store keyed under an older key scheme re-keyed in place, once, so that changing what a key hashes retrains
nothing: each record's identity under its own scheme is rebuilt from what the record holds and checked against its
key (a record whose key cannot be rebuilt so is left as it is: a lookup that misses it computes it again), then its
record and run folder move to the new key. Each step is a rename or an atomic write and can be repeated, so an
upgrade stopped anywhere finishes on the next run; one store-wide lock keeps two processes from upgrading at once.

Scheme 1 (before 2026-11) hashed every setting but output_dir, data_dir and log_with, and not a user's NLI file."""

from __future__ import annotations

import json
from pathlib import Path

from ..io import holder_lock, write_json_atomic
from .identity import (KEY_SCHEME, USER_FILES, computing_settings, configuration_digest, data_fingerprint,
                       digest_of, evaluation_protocol, files_of, user_file)
from .records import content_digest, read_checked

#: the file that says a store's key scheme (written with its first record, or by its upgrade)
STORE_FILE = "store.json"
#: where records that two old keys both re-key to go (the same computation, trained twice under settings that
#: compute nothing: one is kept, the other kept here, not deleted)
DUPLICATES = "re-keyed-duplicates"


def scheme(store) -> int:
    """The key scheme of the store's records: its store file's, else 1 where it holds records, else this one."""
    path = store.root / STORE_FILE
    if path.is_file():
        return json.loads(path.read_text()).get("key_scheme", 1)
    return 1 if any((store.root / "records").glob("*.json")) else KEY_SCHEME


def upgrade(store) -> None:
    """Re-key store's records to KEY_SCHEME where they are older, saying so in one line."""
    if scheme(store) == KEY_SCHEME:
        return
    lock_path = store.root / "locks" / "store-upgrade.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with holder_lock(lock_path):
        if scheme(store) == KEY_SCHEME:  # another process upgraded it while this one waited
            return
        upgraded, moved, kept = 0, 0, []
        for path in sorted((store.root / "records").glob("*.json")):
            record = read_checked(path)
            if record is None or record.get("key_scheme") == KEY_SCHEME:
                continue
            new = rekeyed(record, store.data_dir)
            if new is None:
                kept.append(path.stem)
                continue
            _move(store, record, new)
            upgraded, moved = upgraded + 1, moved + (new["key"] != record["key"])
        write_json_atomic(store.root / STORE_FILE, {"key_scheme": KEY_SCHEME})
    left = (f"; {len(kept)} whose key could not be rebuilt (their data files changed since) are left under their "
            f"old keys and computed again when asked: {', '.join(kept)}") if kept else ""
    store.announce(f"results store {store.root}: {upgraded} record(s) upgraded to key scheme {KEY_SCHEME}, {moved} of "
                   f"them re-keyed (settings that compute nothing, such as log_steps, left the key); nothing "
                   f"retrained{left}")


def scheme1_identity(record: dict, data: str) -> dict:
    """What a scheme-1 key hashed, from the record that key named (data: the data fingerprint it was keyed with)."""
    what = {"subject": record["subject"], "code": record["code_version"], "data": data}
    if protocol := evaluation_protocol(record.get("profile"), bool(record.get("evaluation_amp"))):
        what["evaluation"] = protocol
    config = record.get("config") or {}
    what.update({digest: _md5(config[name]) for name, digest in USER_FILES.items()
                 if name != "nli_data" and user_file(config.get(name))})
    if record.get("method_source"):
        what["method_source"] = record["method_source"]
    return what


def rekeyed(record: dict, data_dir: str) -> dict | None:
    """record under KEY_SCHEME (its key, configuration digest and files), or None where its scheme-1 key cannot be
    rebuilt from what it holds."""
    for data in dict.fromkeys((record.get("data_checksums"), data_fingerprint(data_dir))):
        try:
            old = scheme1_identity(record, data)
        except (OSError, KeyError):
            return None
        if digest_of(old) == record["key"]:
            break
    else:
        return None
    subject = computing_settings(record["subject"])
    what = {**old, "subject": subject}
    config = record.get("config") or {}
    what.update({USER_FILES["nli_data"]: _md5(config["nli_data"])} if user_file(config.get("nli_data")) else {})
    key = digest_of(what)
    new = {**record, "key": key, "key_scheme": KEY_SCHEME, "configuration": configuration_digest(what),
           "subject": subject, "files": files_of(record.get("config"), data_dir)}
    if record["subject"].get("kind") == "trained":
        new["model_dir"] = str(Path(record["model_dir"]).parent.parent / key / "model")
        new["config"] = {**config, "output_dir": str(Path(config["output_dir"]).parent / key)}
    new.pop("digest", None)
    return {**new, "digest": content_digest(new)}


def _md5(path: str) -> str:
    from ..data.loaders import md5_file

    return md5_file(Path(path))


def _move(store, record: dict, new: dict) -> None:
    """record's run folder and record to new's key: the run first (a record always names a run that is there, or is
    moved by the next try), the new record, then the old one gone."""
    old_key, key = record["key"], new["key"]
    old_run, run = store.run_dir(old_key), store.run_dir(key)
    if key == old_key:  # nothing it hashes left the key (a model evaluated as it is): its new fields only
        write_json_atomic(store.record_path(key), new)
        return
    if store.record_path(key).is_file():  # the same computation, recorded twice under settings that compute nothing
        aside = _duplicate(store, old_key)
        if old_run.exists():
            old_run.replace(aside / "run")
        store.record_path(old_key).replace(aside / "record.json")
        return
    if old_run.exists():
        if run.exists():  # a folder of the new key's that no record names (not the kit's doing): kept aside
            run.replace(_duplicate(store, key) / "run")
        old_run.replace(run)
    write_json_atomic(store.record_path(key), new)
    store.record_path(old_key).unlink()


def _duplicate(store, key: str) -> Path:
    aside = store.root / DUPLICATES / key
    aside.mkdir(parents=True, exist_ok=True)
    return aside
