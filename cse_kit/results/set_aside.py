"""Stale records set aside while they are recomputed, so that nothing is lost: `<root>/set-aside/<key>/` holds the
record (`record.json`), its trained model's run folder (`run/`, unless it is kept in place to be evaluated again) and
why (`why.json`). It is removed once the record's replacement holds numbers; until then `cse-kit status --stale`
lists it and `cse-kit status --restore KEY` puts it back. Every move is a rename on the store's own file system, and
each step leaves a state the next run finishes or undoes (the callers hold the key's lock)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from ..environment import describe, describe_versions
from ..io import write_json_atomic
from .records import content_digest, read_checked

FOLDER = "set-aside"


def folder(store, key: str) -> Path:
    return store.root / FOLDER / key


def put_aside(store, key: str, why: list[str], *, reevaluate_only: bool) -> None:
    """Set key's record aside. reevaluate_only: a trained run keeps its model in place; its record is copied aside
    and stays, its evaluations cleared and its environment this one's (the one it trained in kept as
    `training_environment`), so the notebooks evaluate it again without training it."""
    record = read_checked(store.record_path(key))
    if record is None:
        return
    aside = folder(store, key)
    aside.mkdir(parents=True, exist_ok=True)
    keep_run = reevaluate_only and record["subject"].get("kind") == "trained"
    write_json_atomic(aside / "why.json", {"why": why, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                           "reevaluate_only": keep_run})
    write_json_atomic(aside / "record.json", record)
    if keep_run:
        fresh = {**record, "metrics": {}, "environment": describe(),
                 "training_environment": record.get("training_environment", record.get("environment"))}
        fresh.pop("digest")
        write_json_atomic(store.record_path(key), {**fresh, "digest": content_digest(fresh)})
        return
    if store.run_dir(key).exists():
        store.run_dir(key).replace(aside / "run")
    store.record_path(key).unlink()


def replaced(store, key: str) -> None:
    """key's record has been written again with numbers: its set-aside copy is no longer needed."""
    shutil.rmtree(folder(store, key), ignore_errors=True)


def listing(store) -> dict[str, dict]:
    out = {}
    for aside in sorted((store.root / FOLDER).glob("*/why.json")):
        try:
            out[aside.parent.name] = json.loads(aside.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            out[aside.parent.name] = {"why": ["its why.json is unreadable"]}
    return out


def restore(store, key: str) -> None:
    """The set-aside record and its model back in place; an unfinished replacement (a record without numbers yet, a
    half-trained run folder) is dropped."""
    aside = folder(store, key)
    if not (aside / "record.json").is_file():
        raise KeyError(f"no record {key} is set aside in {store.root / FOLDER} (`cse-kit status --stale` lists them)")
    if (aside / "run").is_dir():
        shutil.rmtree(store.run_dir(key), ignore_errors=True)
        store.run_dir(key).parent.mkdir(parents=True, exist_ok=True)
        (aside / "run").replace(store.run_dir(key))
    store.record_path(key).parent.mkdir(parents=True, exist_ok=True)
    (aside / "record.json").replace(store.record_path(key))
    shutil.rmtree(aside)


def run_words(record: dict) -> str:
    """A record's run in words: `preset (profile profile, seed S)`, or the evaluated model."""
    subject = record["subject"]
    what = subject.get("preset") or subject.get("method") if subject["kind"] == "trained" else subject["model"]
    seed = f", seed {record['seed']}" if record.get("seed") is not None else ""
    return f"{what} ({record.get('profile') or 'no'} profile{seed})"


def stale_lines(store, results_dir_words: str = "") -> list[str]:
    """`cse-kit status --stale`: one line per record that other library versions computed, with why, and one per
    record set aside while it is recomputed (`results_dir_words`: the --results-dir its restore command needs)."""
    stale, aside = store.stale(), store.set_aside()
    if not stale and not aside:
        here = ", ".join(f"{k} {v}" for k, v in describe_versions().items())
        return [f"no stale record in {store.root}: every record was computed with this environment's library "
                f"versions (major.minor of {here})"]
    lines = [f"{key}  {run_words(store.read(key))}: {'; '.join(why)}" for key, why in stale.items()]
    if stale:
        lines.append(f"{len(stale)} stale record(s) in {store.root}; `cse-kit report --recompute-stale` recomputes them")
    return lines + [f"{key}  set aside {note.get('when', '')} ({'; '.join(note['why'])}), its replacement unfinished: "
                    f"`cse-kit status --restore {key}{results_dir_words}` puts it back" for key, note in aside.items()]


def restore_lines(store, keys: list[str]) -> list[str]:
    """`cse-kit status --restore KEY|all`: set-aside records back in place, a line each; an unknown key refused."""
    aside = store.set_aside()
    keys = list(aside) if keys == ["all"] else keys
    unknown = [key for key in keys if key not in aside]
    if unknown:
        raise ValueError(f"no record {unknown[0]} is set aside in {store.root} (set aside: "
                         f"{', '.join(aside) or 'none'}; `cse-kit status --stale` lists them)")
    lines = []
    for key in keys:
        store.restore(key)
        lines.append(f"{key}  restored: {run_words(store.read(key))}")
    return lines
