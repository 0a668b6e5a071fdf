"""A store re-keyed in place, once, so that changing what a key hashes retrains nothing: each record's identity
under its own scheme is rebuilt from what the record holds and checked against its key (a record whose key cannot be
rebuilt so is left as it is: a lookup that misses it computes it again), then its record and run folder move to the
new key. Each step is a rename or an atomic write and can be repeated, so an upgrade stopped anywhere finishes on the
next run; one store-wide lock keeps two processes from upgrading at once.

Scheme 1 (before 2026-11) hashed every setting but output_dir, data_dir and log_with, and not a user's NLI file;
scheme 2 every setting that computes, each method's settings as TrainConfig fields (every method's, a profile's
generator in a SimCSE run's key too); scheme 3 a method's own settings as its Options.

The code a record was computed with is in its key, so a change of the kit's code computes every run again, except
where the change is known to give the same numbers: code_lineage.json lists (from, to) code digests between which the
whole `cse-kit doctor` printed every check the same (it writes the entry itself: cse_kit.doctor). A record computed
by a code on the way to this one is carried to this code's key; it says so (`code_lineage`: the codes it came
through). An entry may name runs whose numbers the change did move though the doctor checks none of them
(`except`: settings, as dotted paths into a record's config, and the values that mark them): those are not carried,
and are computed again when asked."""

from __future__ import annotations

import json
from pathlib import Path

from ..io import holder_lock, write_json_atomic
from ..train.config import TrainConfig
from .identity import (KEY_SCHEME, USER_FILES, code_version, computing_settings, configuration_digest,
                       data_fingerprint, digest_of, evaluation_protocol, files_of, user_file)
from .records import content_digest, read_checked

#: (from, to) code digests that give the same numbers, as the whole doctor found (cse_kit.doctor writes it)
LINEAGE_FILE = Path(__file__).with_name("code_lineage.json")

#: the file that says a store's key scheme (written with its first record, or by its upgrade)
STORE_FILE = "store.json"
#: where records that two old keys both re-key to go (the same computation, trained twice under settings that
#: compute nothing: one is kept, the other kept here, not deleted)
DUPLICATES = "re-keyed-duplicates"


def store_state(store) -> dict:
    """The store file's {key_scheme, code}: the scheme and the code its records were last upgraded to."""
    path = store.root / STORE_FILE
    if path.is_file():
        return json.loads(path.read_text())
    return {"key_scheme": 1} if any((store.root / "records").glob("*.json")) else {"key_scheme": KEY_SCHEME}


def scheme(store) -> int:
    """The key scheme of the store's records: its store file's, else 1 where it holds records, else this one."""
    return store_state(store).get("key_scheme", 1)


def equivalent_codes(code: str) -> set[str]:
    """The code digests that lead to `code` through code_lineage.json (the same numbers, by the whole doctor)."""
    return set(carried_codes(code))


def carried_codes(code: str) -> dict[str, list[dict]]:
    """Each code digest that leads to `code` through code_lineage.json, with the exceptions of the entries on its way
    (the runs whose numbers moved there: not carried)."""
    entries = json.loads(LINEAGE_FILE.read_text()) if LINEAGE_FILE.is_file() else []
    found, frontier = {}, {code: []}
    while frontier:
        frontier = {e["from"]: [*frontier[e["to"]], *e.get("except", [])] for e in entries
                    if e["to"] in frontier and e["from"] not in found and e["from"] != code}
        found.update(frontier)
    return found


def excepted(record: dict, exceptions: list[dict]) -> bool:
    """Whether the record's run is one of `exceptions` (each: dotted config paths -> the values that mark the run)."""
    def value(path: str):
        found = record.get("config") or {}
        for part in path.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        return found

    return any(all(value(path) in values for path, values in exception.items()) for exception in exceptions)


def add_lineage(old: str, new: str, evidence: str) -> None:
    """Say that code `new` gives the numbers code `old` gave (evidence: how that was found)."""
    entries = json.loads(LINEAGE_FILE.read_text()) if LINEAGE_FILE.is_file() else []
    if old != new and not any((e["from"], e["to"]) == (old, new) for e in entries):
        write_json_atomic(LINEAGE_FILE, [*entries, {"from": old, "to": new, "evidence": evidence}])


def _current(store, state: dict) -> bool:
    return state.get("key_scheme") == KEY_SCHEME and (state.get("code") == code_version() or not any(
        (store.root / "records").glob("*.json")))


def upgrade(store) -> None:
    """Re-key store's records to KEY_SCHEME and this code where they are older, saying so in one line."""
    if _current(store, store_state(store)):
        return
    lock_path = store.root / "locks" / "store-upgrade.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with holder_lock(lock_path):
        if _current(store, store_state(store)):  # another process upgraded it while this one waited
            return
        lineage = carried_codes(code_version())
        upgraded, moved, moved_code, kept = 0, 0, 0, []
        for path in sorted((store.root / "records").glob("*.json")):
            record = read_checked(path)
            code = record and record["code_version"]
            carried = {code} if code in lineage and not excepted(record, lineage[code]) else set()
            if record is None or (record.get("key_scheme") == KEY_SCHEME and not carried):
                continue
            new = rekeyed(record, store.data_dir, carried)
            if new is None:
                kept.append(path.stem)
                continue
            _move(store, record, new)
            upgraded, moved = upgraded + 1, moved + (new["key"] != record["key"])
            moved_code += new["code_version"] != record["code_version"]
        write_json_atomic(store.root / STORE_FILE, {"key_scheme": KEY_SCHEME, "code": code_version()})
    if upgraded or kept:
        left = (f"; {len(kept)} whose key could not be rebuilt (their data files or method changed since) are left "
                f"under their old keys and computed again when asked: {', '.join(kept)}") if kept else ""
        code = (f", {moved_code} of them carried to this code ({code_version()}), which the whole doctor found to "
                "give their numbers (code_lineage.json)") if moved_code else ""
        store.announce(f"results store {store.root}: {upgraded} record(s) upgraded to key scheme {KEY_SCHEME}{code}, "
                       f"{moved} of them re-keyed; nothing retrained{left}")


def old_identity(record: dict, data: str) -> dict:
    """What the record's key hashed under its own scheme (data: the data fingerprint it was keyed with)."""
    what = scheme1_identity(record, data)
    config = record.get("config") or {}
    if record.get("key_scheme", 1) > 1 and user_file(config.get("nli_data")):
        what[USER_FILES["nli_data"]] = _md5(config["nli_data"])
    return what


def new_subject(record: dict, settings: dict | None) -> dict:
    """The record's subject as KEY_SCHEME lays it out from its settings read again as a configuration (saved_settings;
    None for a model evaluated as it is), the precision it trained in as recorded, and its padding as recorded: a
    record from before pad_to existed (none in its subject, or, under scheme 1, the setting as given) padded each
    batch to its longest row."""
    if settings is None:
        return record["subject"]
    padding = record["subject"].get("pad_to", "auto")
    return {"kind": "trained", **computing_settings(settings), "mixed_precision": record["subject"]["mixed_precision"],
            "pad_to": "longest" if padding == "auto" else padding}


def saved_settings(record: dict) -> dict | None:
    """A trained record's settings as this release lays them out (TrainConfig.from_saved: a method's settings into
    its Options, other methods' left out); None for a model evaluated as it is."""
    if record["subject"].get("kind") != "trained":
        return None
    return TrainConfig.from_saved(record["config"]).to_dict()


def scheme1_identity(record: dict, data: str) -> dict:
    """What a scheme-1 key hashed, from the record that key named (data: the data fingerprint it was keyed with); a
    later scheme's record holds the subject it hashed."""
    what = {"subject": record["subject"], "code": record["code_version"], "data": data}
    if protocol := evaluation_protocol(record.get("profile"), bool(record.get("evaluation_amp"))):
        what["evaluation"] = protocol
    config = record.get("config") or {}
    what.update({digest: _md5(config[name]) for name, digest in USER_FILES.items()
                 if name != "nli_data" and user_file(config.get(name))})
    if record.get("method_source"):
        what["method_source"] = record["method_source"]
    return what


def rekeyed(record: dict, data_dir: str, carried: set[str]) -> dict | None:
    """record under KEY_SCHEME (its key, configuration digest, subject and files) and, where its code is `carried`
    (one on the way to this one), this code; None where its old key cannot be rebuilt from what it holds."""
    for data in dict.fromkeys((record.get("data_checksums"), data_fingerprint(data_dir))):
        try:
            old = old_identity(record, data)
        except (OSError, KeyError):
            return None
        if digest_of(old) == record["key"]:
            break
    else:
        return None
    try:
        settings = saved_settings(record)
    except (TypeError, ValueError):  # a configuration this code refuses (a method's option it no longer has)
        return None
    subject = new_subject(record, settings)
    code = code_version() if record["code_version"] in carried else record["code_version"]
    what = {**old, "subject": subject, "code": code}
    key = digest_of(what)
    new = {**record, "key": key, "key_scheme": KEY_SCHEME, "configuration": configuration_digest(what),
           "subject": subject, "files": files_of(record.get("config"), data_dir), "code_version": code}
    if code != record["code_version"]:
        new["code_lineage"] = [*record.get("code_lineage", []), record["code_version"]]
    if settings is not None:
        new["model_dir"] = str(Path(record["model_dir"]).parent.parent / key / "model")
        new["config"] = {**settings, "output_dir": str(Path(settings["output_dir"]).parent / key)}
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
