"""Which run is published: a record key, a results store's run folder or a `cse-kit train` run folder, found with its
record (or its summary.json) and the records of the same configuration under other seeds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..methods.errors import MethodError
from ..results import CorruptRecord, ResultStore, UnreadableRecord
from ..train.method_settings import former_layout
from .origins import METHOD_PAPERS


class PublishError(ValueError):
    """What stops a publish or a push, in one line that names the fix."""


@dataclass
class Run:
    """What a card is written from: the run's record (None for a run trained outside a results store, with only its
    summary.json), its model folder, the records of the same configuration with other seeds, and the data folder
    whose STS gold scores its per-pair cosines are correlated with."""

    model_dir: Path
    config: dict
    record: dict | None
    summary: dict | None
    seeds: list[dict]
    data_dir: str | None = None

    def __post_init__(self):
        # the settings as the card names them: a kit method's under their field names (former_layout)
        try:
            self.config = former_layout(self.config)
        except MethodError:  # a researcher's method not importable here: its options stay in method_options
            pass

    @property
    def profile(self) -> str:
        return self.config.get("profile") or "?"

    @property
    def preset(self) -> str | None:
        return self.config.get("preset")

    @property
    def method(self) -> str:
        return self.config["method"]

    @property
    def method_source(self) -> str | None:
        """The digest of a researcher's method's source that trained it (its record's, else its summary.json's);
        None for the kit's own methods and a run trained before the kit stored it."""
        return (self.record or self.summary or {}).get("method_source")


def _is_key(text: str) -> bool:
    return len(text) == 20 and all(c in "0123456789abcdef" for c in text)


def find_run(target: str, results_dir=None) -> Run:
    """A record key of the results store, a run folder of it (`<store>/runs/<key>`) or its model, or a `cse-kit
    train` run folder (runs/<preset>-<profile>, with summary.json) or its model."""
    store = ResultStore(results_dir)
    path = Path(target).expanduser()
    if not path.exists() and _is_key(target):
        record = stored_record(store, target)
        if record is None:
            raise PublishError(f"no record {target} in the results store {store.root} (--results-dir names another "
                               "store)")
        return _from_record(store, record)
    if not path.is_dir():
        raise PublishError(f"{target} is neither a folder nor a record key of the results store {store.root}: give "
                           "a run folder, its model folder, or a record key (a notebook's table has one per run)")
    found = ResultStore.of_run_dir(path)  # a results store's run, wherever the store is
    if found is not None:
        run_store, key = found
        return _from_record(run_store, stored_record(run_store, key))
    path = path.resolve()
    run_dir = path.parent if path.name == "model" else path
    summary_path = run_dir / "summary.json"
    if (run_dir / "model").is_dir() and summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        return Run(run_dir / "model", summary["config"], None, summary, [])
    raise PublishError(f"{target} is not a trained run: give the folder `cse-kit train` wrote (with summary.json and "
                       "model/), a results store's runs/<key>, or a record key")


def stored_record(store: ResultStore, key: str) -> dict | None:
    """The store's checked record of key, None where it has none; a damaged one is a PublishError."""
    try:
        return store.read(key)
    except (CorruptRecord, UnreadableRecord) as err:
        raise PublishError(f"record {key} of the results store {store.root} is damaged ({err}): run its notebook "
                           "again to recompute it") from None


def _from_record(store: ResultStore, record: dict) -> Run:
    if record["subject"]["kind"] != "trained":
        raise PublishError(f"record {record['key']} evaluates {record['model_dir']} as it is; only a model the kit "
                           "trained is published")
    model_dir = store.run_dir(record["key"]) / "model"
    if not model_dir.is_dir():
        raise PublishError(f"the model of record {record['key']} is gone ({model_dir}): run its notebook again with "
                           "force=True to retrain it")
    return Run(model_dir, record["config"], record, None, store.same_configuration(record), _gold_dir(store, record))


def _gold_dir(store: ResultStore, record: dict) -> str:
    """Where the gold scores of the record's STS test pairs are: the data folder it was evaluated with, else (a store
    copied from another machine) the store's, $CSE_KIT_DATA or data/."""
    given = record["config"].get("data_dir")
    return given if given and Path(given).is_dir() else store.data_dir


def model_name(run: Run, repo_id: str | None) -> str:
    """ORG/NAME: the repository's, else cse-kit/<preset>-<profile>-seed<seed> (MTEB's model names have an org)."""
    named = run.preset if run.preset and run.method in METHOD_PAPERS else run.method  # one's own: its name
    return repo_id or f"cse-kit/{named}-{run.profile}-seed{run.config.get('seed')}"
