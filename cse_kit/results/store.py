"""The results store: one JSON record per run under `records/<key>.json`, its trained model under `runs/<key>/`,
keyed by the run's identity (cse_kit.results.identity), so notebooks and the report reuse finished runs instead of
retraining them. Every other module reads records through this class (read, records, same_configuration,
of_run_dir), never their files.

A record holds the config, code version, data checksums and the files its key hashes, environment, seed, dev curve,
timings and the metrics of every evaluation asked of it so far (`sts_test`, `sts_dev`, `transfer_dev`,
`transfer_test`, `transfer_fasttest`, `geometry`); asking for a new evaluation adds it to the record. Writes are
atomic and each record carries a digest of its content; a damaged record is refused or set aside
(cse_kit.results.records). One file lock per key (`ResultStore.lock`) makes a second process wait for the first
one's run and reuse it; an interrupted training run resumes from its checkpoint. A stale record (computed with other
library versions) being recomputed is set aside with its model, listed and restorable, until its replacement holds
numbers (cse_kit.results.set_aside)."""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from pathlib import Path

from ..data import resolve_data_dir, unverified_reads
from ..environment import describe, stale_versions
from ..eval.user_tasks import UserTask
from ..io import acquire_or_wait, holder_lock, write_json_atomic
from ..methods.registry import method_class, method_digest
from ..train.config import TrainConfig
from ..train.precision import resolve_precision
from ..train.tracking import log_evaluations
from . import set_aside, upgrade
from .evaluations import EVALUATIONS, _user_task, evaluation_name, with_shared_encodings
from .identity import (KEY_SCHEME, Pretrained, code_version, configuration_digest, data_checksums, digest_of,
                       files_of, identity)
from .upgrade import STORE_FILE
from .records import (CorruptRecord, check_record, content_digest, default_results_dir, git_commit, is_trained,
                      read_checked, read_record)

#: "1": a store's evaluations encode under AMP (bf16 on a CPU with a bf16 unit; cse_kit.eval.encode.Encoder), in
#: records of their own keys; unset or "0": fp32, the papers' protocol. `cse-kit report --amp` sets it for the kernels.
EVAL_AMP_ENV = "CSE_KIT_EVAL_AMP"


def evaluation_amp() -> bool:
    """Whether $CSE_KIT_EVAL_AMP asks for evaluations under AMP."""
    text = os.environ.get(EVAL_AMP_ENV, "0").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"{EVAL_AMP_ENV} must be 1 (evaluate under AMP) or 0 (fp32), got {text!r}")
    return text == "1"


_LOCKS: dict = {}  # lock file -> its FileLock: one object per file, so nested holders in a process re-enter it


class ResultStore:
    """Records under `results_dir/records/<key>.json`, training runs under `results_dir/runs/<key>/`.

    force=True recomputes every record this store is asked for, once (a record asked for twice in one notebook is
    trained once)."""

    def __init__(self, results_dir=None, data_dir=None, *, force: bool = False, progress: bool = False,
                 notify=None, status=None, amp: bool | None = None, cuda: bool | None = None):
        """notify(message): where the store says it waits for a run another process computes and starts training
        one (default: a warning, and the training header on stdout; notebooks pass their progress line, which
        `cse-kit report` shows on the console as it happens and leaves off the page). status(message), when given:
        where a run it computes says how far it is (its training step and the time left, its evaluations). amp:
        evaluate under AMP, in records keyed apart (identity.evaluation_protocol); None: $CSE_KIT_EVAL_AMP. cuda:
        whether its runs train on a GPU (their keys say the precision they train in: identity.subject_dict), None
        for this machine; True for a SLURM submitter on a node without one whose jobs get GPUs
        (results.parallel.jobs_get_gpus)."""
        self.root = Path(results_dir) if results_dir else default_results_dir()
        self.data_dir = str(resolve_data_dir(data_dir))
        self.force, self.progress = force, progress
        self.amp = evaluation_amp() if amp is None else amp
        self.cuda = cuda
        self.notify = notify or (lambda message: warnings.warn(message, stacklevel=3))
        self.announce = notify or print  # a training run's header line
        self.status = status
        self._recomputed: set[str] = set()
        self._upgraded = False

    # --- identity -----------------------------------------------------------------------------------------------

    def identity(self, subject: TrainConfig | Pretrained) -> dict:
        return identity(subject, self.data_dir, self.amp, self.cuda)

    def key(self, subject: TrainConfig | Pretrained) -> str:
        return digest_of(self.identity(subject))

    def record_path(self, key: str) -> Path:
        return self.root / "records" / f"{key}.json"

    def run_dir(self, key: str) -> Path:
        return self.root / "runs" / key

    def exists(self) -> bool:
        """Whether root is a results store (it has written a record, or is being written)."""
        return (self.root / "records").is_dir() or (self.root / STORE_FILE).is_file()

    def _ready(self) -> None:
        """Re-key a store written under an older key scheme, once (cse_kit.results.upgrade)."""
        if not self._upgraded:
            self._upgraded = True
            upgrade.upgrade(self)

    def lock(self, key: str):
        """The lock of one key, held while its record is read, computed or written: a file lock (`filelock`, an
        OS lock the kernel releases when its process dies, so a crash never leaves it held). One object per lock
        file in a process, re-entrant, so a caller holding it may call `get`. `with store.lock(key):` waits;
        `store.lock(key).acquire(timeout=0)` raises `filelock.Timeout` when another process holds it. The lock file
        says who holds it (cse_kit.io.lock_holder)."""
        path = (self.root / "locks" / f"{key}.lock").resolve()
        if path not in _LOCKS:
            path.parent.mkdir(parents=True, exist_ok=True)
            _LOCKS[path] = holder_lock(path)
        return _LOCKS[path]

    # --- reading ------------------------------------------------------------------------------------------------

    def read(self, key: str) -> dict | None:
        """The checked record of key, None where there is none (CorruptRecord for a damaged one, UnreadableRecord for
        one that is not JSON)."""
        self._ready()
        path = self.record_path(key)
        if not path.is_file():
            return None
        record = read_record(path)
        check_record(record, key)
        return record

    def records(self):
        """Every readable, checked record of the store, by key (damaged ones are left to the lookups that set them
        aside)."""
        self._ready()
        for path in sorted((self.root / "records").glob("*.json")):
            if (record := read_checked(path)) is not None:
                yield record

    def same_configuration(self, record: dict) -> list[dict]:
        """The store's records of record's configuration under every seed it holds (record among them), by seed:
        the same configuration digest (every computing setting but the seed, the code, the data and a user's files,
        a researcher's method's source, the evaluation protocol)."""
        found = {record.get("seed"): record}
        if record.get("configuration") is None:  # a record whose old key could not be rebuilt: its own alone
            return [record]
        for other in self.records():
            if other["key"] != record["key"] and other.get("configuration") == record.get("configuration"):
                found.setdefault(other.get("seed"), other)
        return [found[seed] for seed in sorted(found, key=lambda s: (s is None, s or 0))]

    @classmethod
    def of_run_dir(cls, path) -> tuple["ResultStore", str] | None:
        """(store, key) where path is a store's run folder `<root>/runs/<key>` (or its model/) whose record the
        store holds; None otherwise."""
        run = Path(path).expanduser().resolve()
        run = run.parent if run.name == "model" else run
        if run.parent.name != "runs":
            return None
        store = cls(run.parent.parent)
        store._ready()
        return (store, run.name) if store.record_path(run.name).is_file() else None

    def run_of_model(self, model_dir) -> str | None:
        """The key of this store's trained run whose exported model model_dir is (<root>/runs/<key>/model), or None."""
        path = Path(model_dir).expanduser().resolve()
        if path.name == "model" and path.parent.parent == (self.root / "runs").resolve():
            self._ready()
            if self.record_path(path.parent.name).is_file():
                return path.parent.name
        return None

    def check_readable(self) -> None:
        """Raise UnreadableRecord for the first record of this store that is not JSON (before a report runs)."""
        self._ready()
        for path in sorted((self.root / "records").glob("*.json")):
            read_record(path)

    def has(self, subject: TrainConfig | Pretrained, evals=("sts_test",)) -> bool:
        """Whether subject's record is finished with every evaluation in evals (read only: no lock, nothing moved)."""
        return self.has_key(self.key(subject), evals)

    def has_key(self, key: str, evals=("sts_test",)) -> bool:
        self._ready()
        record = read_checked(self.record_path(key))
        return record is not None and self._exported_pooler(record) is None \
            and all(evaluation_name(e) in record["metrics"] for e in evals)

    # --- stale records ------------------------------------------------------------------------------------------

    def stale(self) -> dict[str, list[str]]:
        """{key: why} of this store's records computed under other major.minor versions of the libraries that decide
        numbers than this environment's (cse_kit.environment.stale_versions); unreadable records are left to
        check_readable."""
        return {record["key"]: why for record in self.records()
                if (why := stale_versions(record.get("environment") or {}))}

    def set_aside_stale(self, *, reevaluate_only: bool = False) -> list[str]:
        """Set every stale record aside, so the notebooks that show it compute it again: its record and model stay
        readable beside the store (set_aside, restore) until the replacement holds numbers. reevaluate_only: keep
        each trained run's model and evaluate it again, without retraining. Returns their keys."""
        stale = self.stale()
        for key, why in stale.items():
            with self.lock(key):
                set_aside.put_aside(self, key, why, reevaluate_only=reevaluate_only)
        return list(stale)

    def set_aside(self) -> dict[str, dict]:
        """{key: what was set aside (why, when, whether its model was kept to re-evaluate)} of this store."""
        return set_aside.listing(self)

    def restore(self, key: str) -> None:
        """Put a set-aside record and its model back in place of its unfinished replacement."""
        with self.lock(key):
            set_aside.restore(self, key)

    # --- computing ----------------------------------------------------------------------------------------------

    def _exported_pooler(self, record: dict) -> str | None:
        """The pooler a trained record's model states (cse_kit.json) where the record was evaluated with another: its
        training pooler, as records made before the store read the export were (ConSERT trains on `avg` and is
        tested on `avg_top2`; supervised SimCSE tests with its MLP as the model's pooler, `cls`). None otherwise."""
        from ..train.export import ExportSettings

        if not is_trained(record):
            return None
        stated = ExportSettings(self.run_dir(record["key"]) / "model").pooler
        return stated if stated and stated != record["pooler"] else None

    def get(self, subject: TrainConfig | Pretrained, evals=("sts_test",), *, on_dev=None) -> dict:
        """The record of subject with every evaluation in evals (names of EVALUATIONS, or a researcher's tasks,
        cse_kit.eval.user_tasks.UserTask): reused where finished, computed where not. on_dev: train()'s, for a run
        trained here (a study's pruner); a run it prunes raises loop.TrainingPruned and leaves no record."""
        unknown = [e for e in evals if not isinstance(e, UserTask) and e not in EVALUATIONS]
        if unknown:
            raise ValueError(f"unknown evaluation(s) {unknown}; choose from {', '.join(EVALUATIONS)}, or a task of "
                             "your own (cse_kit.eval.user_tasks.UserTask)")
        run = {**EVALUATIONS, **{e.evaluation: _user_task(e) for e in evals if isinstance(e, UserTask)}}
        evals = [evaluation_name(e) for e in evals]
        self._ready()
        what = self.identity(subject)
        key = digest_of(what)
        lock = self.lock(key)
        acquire_or_wait(lock, f"waiting for run {key}: another process is computing it", self.notify)
        try:
            if self.force and key not in self._recomputed:
                self._discard(key)
                self._recomputed.add(key)
            record = self._load(key) or self._new_record(key, subject, what, on_dev)
            missing = with_shared_encodings([e for e in evals if e not in record["metrics"]], record)
            if missing:
                self._evaluate(record, missing, run)
            return record
        finally:
            lock.release()

    def _evaluate(self, record: dict, missing: list[str], run: dict) -> None:
        encoder = self.encoder(record)
        if record.get("evaluation_amp"):
            record["evaluation_precision"] = encoder.precision
        for name in missing:
            if self.status:
                self.status(f"evaluating {name}")
            start = time.perf_counter()
            record["metrics"][name] = run[name](encoder, self.data_dir, record.get("profile"))
            record["timings"][f"eval_{name}_s"] = time.perf_counter() - start
        record["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        self._write(record)
        if is_trained(record):  # the test numbers beside the run's curves
            log_evaluations(self.run_dir(record["key"]), {name: record["metrics"][name] for name in missing},
                            self.announce)

    def get_mteb(self, target, tasks: list, *, encoder=None, force: bool = False) -> tuple[dict, list[str]]:
        """The record of target (a subject, or the key of a record in this store) with an MTEB result for every task
        (mteb tasks: cse_kit.eval.mteb_eval.resolve_tasks) in its metrics' `mteb`, by task name. A stored result of the
        same mteb version, data revision, wrapper and encoding is reused unless force; the others run one task at a
        time through mteb, the record written after each (an interrupted run keeps the tasks it finished). encoder:
        the record's model ready to encode (default: ResultStore.encoder). Returns (record, the names reused)."""
        from ..eval.mteb_eval import evaluate_tasks

        self._ready()
        key = target if isinstance(target, str) else self.key(target)
        with self.lock(key):
            record = self._load(key) or (None if isinstance(target, str) else
                                         self._new_record(key, target, self.identity(target)))
            if record is None:
                raise FileNotFoundError(f"no record {key} in {self.root}")
            encoder = encoder or self.encoder(record)
            if encoder.pooler != record["pooler"]:
                raise ValueError(f"record {key} was evaluated with pooler {record['pooler']}, not {encoder.pooler}: "
                                 "leave --pooler out")
            evaluated = []
            for name, result in evaluate_tasks(encoder, record["model_dir"], tasks, record["metrics"].get("mteb", {}),
                                               force=force):
                record["metrics"].setdefault("mteb", {})[name] = result
                record["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
                self._write(record)
                evaluated.append(name)
        return record, [t.metadata.name for t in tasks if t.metadata.name not in evaluated]

    def _write(self, record: dict) -> None:
        unverified = unverified_reads()
        if unverified:  # read under CSE_KIT_ALLOW_UNVERIFIED_DATA: say so in the record
            record["unverified_data"] = {**record.get("unverified_data", {}), **unverified}
        record.pop("digest", None)
        record["digest"] = content_digest(record)
        write_json_atomic(self.record_path(record["key"]), record)
        if not (self.root / STORE_FILE).is_file():  # after the record: a store file never names an empty store
            write_json_atomic(self.root / STORE_FILE, {"key_scheme": KEY_SCHEME, "code": code_version()})
        if record["metrics"]:  # the replacement of a set-aside record holds numbers: the old one may go
            set_aside.replaced(self, record["key"])

    def _discard(self, key: str) -> None:
        self.record_path(key).unlink(missing_ok=True)
        shutil.rmtree(self.run_dir(key), ignore_errors=True)

    def _load(self, key: str) -> dict | None:
        path = self.record_path(key)
        if not path.is_file():
            return None
        record = read_record(path)
        try:
            check_record(record, key)
        except CorruptRecord as err:
            aside = path.with_suffix(f".corrupt-{time.strftime('%Y%m%d%H%M%S')}")
            path.replace(aside)
            warnings.warn(f"result record {path} is corrupt ({err}); moved to {aside.name} and recomputing it",
                          stacklevel=3)
            return None
        if stated := self._exported_pooler(record):  # the training is right, its evaluations read the wrong vector
            warnings.warn(f"result record {key} was evaluated with pooler {record['pooler']}, its model is read with "
                          f"{stated}: evaluating it again (its training is kept)", stacklevel=3)
            record = {**record, "pooler": stated, "metrics": {}}
        return record

    def _new_record(self, key: str, subject, what: dict, on_dev=None) -> dict:
        settings = subject.to_dict() if isinstance(subject, TrainConfig) else None
        record = {"key": key, "key_scheme": KEY_SCHEME, "configuration": configuration_digest(what),
                  "subject": what["subject"], "files": files_of(settings, self.data_dir), "profile": subject.profile,
                  "seed": getattr(subject, "seed", None), "code_version": code_version(), "git_commit": git_commit(),
                  "data_checksums": data_checksums(), "environment": describe(), "metrics": {}, "timings": {},
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **({"evaluation_amp": True} if self.amp else {})}
        if isinstance(subject, TrainConfig):
            if source := method_digest(method_class(subject.method)):
                record["method_source"] = source  # a researcher's method: which version of its module trained it
            record.update(self._train(key, subject, on_dev))
        else:
            record["model_dir"], record["pooler"] = subject.model, subject.pooler
        self._write(record)
        return record

    def _train(self, key: str, cfg: TrainConfig, on_dev=None) -> dict:
        from ..train.export import ExportSettings
        from ..train.loop import train

        keyed, here = resolve_precision(cfg.mixed_precision, self.cuda), resolve_precision(cfg.mixed_precision)
        if keyed != here:  # a SLURM GPU job's run, its workers gone: this node would train another run than its key
            raise RuntimeError(f"run {key} is keyed to train in {keyed} on a GPU job, and this machine would train "
                               f"it in {here}: its SLURM workers did not finish it (their logs say why); run again "
                               f"with the workers, or set mixed_precision=no or =bf16 to train it here")
        run = self.run_dir(key)
        cfg = cfg.replace(output_dir=str(run), data_dir=self.data_dir)
        # resumes an interrupted run from its checkpoint
        summary = train(cfg, progress=self.progress, announce=self.announce, status=self.status, on_dev=on_dev)
        curve = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line]
        pooler = ExportSettings(summary["model"]).pooler or cfg.pooler  # the test vector (ConSERT's, sup SimCSE's)
        return {"config": cfg.to_dict(), "model_dir": summary["model"], "pooler": pooler,
                "train": {k: summary[k] for k in ("steps", "best", "best_step", "metric", "processes",
                                                  "mixed_precision", "peak_gpu_memory_bytes", "peak_rss_bytes")},
                "dev_curve": [r for r in curve if "dev" in r], "train_curve": [r for r in curve if "dev" not in r],
                "timings": {f"train_{k}_s": v for k, v in summary["seconds"].items()}}

    def encoder(self, record: dict):
        """The record's model with its pooler, ready to encode (for measurements beyond the stored evaluations)."""
        from ..eval.encode import Encoder
        from ..models import load_encoder, load_model
        from ..train.export import ExportSettings

        model_dir = record["model_dir"]
        if is_trained(record):  # under this store's root, wherever the store was trained
            model_dir = str(self.run_dir(record["key"]) / "model")
            if not Path(model_dir).is_dir():
                raise FileNotFoundError(f"the trained model of record {record['key']} is gone ({model_dir}); "
                                        "rerun with force=True to retrain it")
        # `cls` reads the model's pooler layer (supervised SimCSE's MLP), which the training encoder is built without
        tokenizer, model = load_model(model_dir) if record["pooler"] == "cls" else load_encoder(model_dir)
        stated = ExportSettings(model_dir)
        return Encoder(model, tokenizer, record["pooler"], progress=self.progress, template=stated.prompt,
                       max_length=stated.max_length, amp=bool(record.get("evaluation_amp")))
