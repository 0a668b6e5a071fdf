"""Which run is published: a record key, a results store's run folder or a `cse-kit train` run folder, found with its
record (or its summary.json) and the records of the same configuration under other seeds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..results import CorruptRecord, ResultStore, check_record, read_record
from .origins import METHOD_PAPERS


class PublishError(ValueError):
    """What stops a publish or a push, in one line that names the fix."""

@dataclass
class Run:
    """What a card is written from: the run's record (None for a run trained outside a results store, with only its
    summary.json), its model folder, and the records of the same configuration with other seeds."""

    model_dir: Path
    config: dict
    record: dict | None
    summary: dict | None
    seeds: list[dict]

    @property
    def profile(self) -> str:
        return self.config.get("profile") or "?"

    @property
    def preset(self) -> str | None:
        return self.config.get("preset")

    @property
    def method(self) -> str:
        return self.config["method"]


def _is_key(text: str) -> bool:
    return len(text) == 20 and all(c in "0123456789abcdef" for c in text)


def find_run(target: str, results_dir=None) -> Run:
    """A record key of the results store, a run folder of it (`<store>/runs/<key>`) or its model, or a `cse-kit
    train` run folder (runs/<preset>-<profile>, with summary.json) or its model."""
    store = ResultStore(results_dir)
    path = Path(target).expanduser()
    if not path.exists() and _is_key(target):
        record = _load(store.record_path(target), target)
        if record is None:
            raise PublishError(f"no record {target} in the results store {store.root} (--results-dir names another "
                               "store)")
        return _from_record(store, record)
    if not path.is_dir():
        raise PublishError(f"{target} is neither a folder nor a record key of the results store {store.root}: give "
                           "a run folder, its model folder, or a record key (a notebook's table has one per run)")
    path = path.resolve()
    run_dir = path.parent if path.name == "model" else path
    if run_dir.parent.name == "runs" and _is_key(run_dir.name):  # a results store's run, wherever the store is
        root = run_dir.parent.parent
        record = _load(root / "records" / f"{run_dir.name}.json", run_dir.name)
        if record is not None:
            return _from_record(ResultStore(root), record)
    summary_path = run_dir / "summary.json"
    if (run_dir / "model").is_dir() and summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        return Run(run_dir / "model", summary["config"], None, summary, [])
    raise PublishError(f"{target} is not a trained run: give the folder `cse-kit train` wrote (with summary.json and "
                       "model/), a results store's runs/<key>, or a record key")


def _load(path: Path, key: str) -> dict | None:
    if not path.is_file():
        return None
    record = read_record(path)
    try:
        check_record(record, key)
    except CorruptRecord as err:
        raise PublishError(f"record {path} is damaged ({err}): run its notebook again to recompute it") from None
    return record


def _from_record(store: ResultStore, record: dict) -> Run:
    if record["subject"]["kind"] != "trained":
        raise PublishError(f"record {record['key']} evaluates {record['model_dir']} as it is; only a model the kit "
                           "trained is published")
    model_dir = store.run_dir(record["key"]) / "model"
    if not model_dir.is_dir():
        raise PublishError(f"the model of record {record['key']} is gone ({model_dir}): run its notebook again with "
                           "force=True to retrain it")
    return Run(model_dir, record["config"], record, None, same_configuration(store, record))


def same_configuration(store: ResultStore, record: dict) -> list[dict]:
    """The store's records of record's configuration under every seed it holds (record among them), computed by the
    same code on the same data and evaluation protocol, by seed."""
    def what(r):
        subject = {k: v for k, v in r["subject"].items() if k != "seed"}
        return (json.dumps(subject, sort_keys=True), r.get("code_version"), r.get("data_checksums"),
                bool(r.get("evaluation_amp")))

    found = {record["seed"]: record}
    for path in sorted((store.root / "records").glob("*.json")):
        try:
            other = read_record(path)
            check_record(other, path.stem)
        except (ValueError, OSError):
            continue
        if other.get("subject", {}).get("kind") == "trained" and what(other) == what(record):
            found.setdefault(other["seed"], other)
    return [found[seed] for seed in sorted(found)]


def model_name(run: Run, repo_id: str | None) -> str:
    """ORG/NAME: the repository's, else cse-kit/<preset>-<profile>-seed<seed> (MTEB's model names have an org)."""
    named = run.preset if run.preset and run.method in METHOD_PAPERS else run.method  # one's own: its name
    return repo_id or f"cse-kit/{named}-{run.profile}-seed{run.config.get('seed')}"
