"""The results store: one JSON record per run, keyed by a hash of what determines its numbers (the resolved
configuration, the code that trains and evaluates, the data checksums), so notebooks and the report reuse finished
runs instead of retraining them.

A record holds the config, code version, data checksums, environment, seed, dev curve, timings and the metrics of
every evaluation asked of it so far (`sts_test`, `sts_dev`, `transfer_dev`, `transfer_test`, `transfer_fasttest`,
`geometry`); asking for a new evaluation adds it to the record. Writes are atomic and each record carries a digest
of its content. A record that is not JSON cannot be one the store wrote (its writes are atomic): it was replaced
or damaged, and is refused (UnreadableRecord), never read or replaced, until someone looks at it; a JSON record of
the wrong shape or that fails its digest (edited by hand) is set aside (renamed `*.corrupt-<time>`), reported, and
recomputed. One file lock per key (`ResultStore.lock`) makes a second
process wait for the first one's run and reuse it; an interrupted training run resumes from its checkpoint."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..data import REGISTRY, allow_unverified, resolve_data_dir, unverified_reads
from ..data.loaders import md5_file
from ..data.registry import BUILT_SOURCES
from ..environment import PACKAGE, describe, source_digest, stale_versions
from ..eval.user_tasks import UserTask, evaluate_user_task
from ..io import acquire_or_wait, holder_lock, write_json_atomic
from ..methods.registry import method_class, method_digest
from ..train.config import TrainConfig
from ..train.precision import resolve_precision
from ..train.tracking import log_evaluations

#: The parts of the package whose code decides a result (notebook helpers, report and CLI do not).
RESULT_CODE = ("methods", "train", "eval", "data", "models")
#: ... but for the MTEB wrapper (it changes no SentEval number; each MTEB result carries its own digest,
#: cse_kit.eval.mteb_eval.WRAPPER_DIGEST) and the reader of the papers' published numbers
OUTSIDE_RESULT_CODE = ("eval/mteb_eval.py", "data/published.py")
#: Config fields that say where things are (and where the curves are logged), not what is computed.
LOCATIONS = ("output_dir", "data_dir", "log_with")
#: "1": a store's evaluations encode under AMP (bf16 on a CPU with a bf16 unit; cse_kit.eval.encode.Encoder), in
#: records of their own keys; unset or "0": fp32, the papers' protocol. `cse-kit report --amp` sets it for the kernels.
EVAL_AMP_ENV = "CSE_KIT_EVAL_AMP"


def evaluation_amp() -> bool:
    """Whether $CSE_KIT_EVAL_AMP asks for evaluations under AMP."""
    text = os.environ.get(EVAL_AMP_ENV, "0").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"{EVAL_AMP_ENV} must be 1 (evaluate under AMP) or 0 (fp32), got {text!r}")
    return text == "1"


@dataclass(frozen=True)
class Pretrained:
    """A model evaluated as it is, without training (e.g. DiffCSE Table 11's "Avg. BERT-base")."""

    model: str
    pooler: str
    profile: str | None = None


@lru_cache(maxsize=1)  # once per process: the code a process runs is what it imported at start
def code_version() -> str:
    return source_digest(RESULT_CODE, OUTSIDE_RESULT_CODE)


@lru_cache(maxsize=1)
def data_checksums() -> str:
    """Digest of the checksums every imported or downloaded data file is verified against."""
    return hashlib.sha256((PACKAGE / "data" / "checksums.json").read_bytes()).hexdigest()[:16]


@lru_cache(maxsize=None)
def data_fingerprint(data_dir: str | None = None) -> str:
    """What the data a record is computed from is known to be. The loaders refuse any file that differs from the
    reference copy, so that is the reference checksums; with CSE_KIT_ALLOW_UNVERIFIED_DATA set, files that differ
    may be read, so it is the md5 of every registry file actually present (results from damaged data never land
    under the clean key)."""
    if not allow_unverified():
        return data_checksums()
    root = resolve_data_dir(data_dir)
    digest = hashlib.sha256()
    for ds in REGISTRY.values():
        for path in ds.paths(root):
            if path.is_file():
                digest.update(f"{path.relative_to(root)} {md5_file(path)}\n".encode())
    return f"{data_checksums()}+unverified-{digest.hexdigest()[:16]}"


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PACKAGE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def subject_dict(subject: TrainConfig | Pretrained, cuda: bool | None = None) -> dict:
    """What a record's key hashes. mixed_precision is the precision the run trains in (resolve_precision: `auto` is
    bf16 or fp32 on a CPU by its bf16 unit, bf16 on a GPU; fp16 is fp32 on a CPU), so a store shared by machines
    that resolve a setting differently never shows one machine's run for another's. cuda: whether the run trains
    on a GPU, None for this machine (True for the GPU jobs a SLURM submitter without one plans: results.parallel;
    their worker nodes, with a GPU, compute the same key)."""
    if isinstance(subject, TrainConfig):
        settings = {k: v for k, v in subject.to_dict().items() if k not in LOCATIONS}
        return {"kind": "trained", **settings, "mixed_precision": resolve_precision(subject.mixed_precision, cuda)}
    return {"kind": "pretrained", **dataclasses.asdict(subject)}


def evaluation_protocol(subject: TrainConfig | Pretrained, amp: bool = False) -> dict:
    """What decides a record's numbers beyond its subject (which holds the pooler, the max length and every training
    setting), the code and the data: how much of the evaluation sets its profile's evaluations read
    (evaluation_sample), and AMP when asked (amp). The evaluation mode is in each evaluation's name (`sts_dev`,
    `transfer_fasttest`). Whole sets in fp32 add nothing, so such a record keeps the key it had before samples and
    AMP existed. AMP is keyed as asked, not as the machine resolves it: a record evaluated under AMP, bf16 or,
    without a unit, fp32, never stands for an fp32 one; it says which it ran in (`evaluation_precision`)."""
    protocol = {kind: n for kind in SAMPLES if (n := evaluation_sample(subject.profile, kind)) is not None}
    return {**protocol, "amp": True} if amp else protocol


def record_key(subject: TrainConfig | Pretrained, data_dir=None, amp: bool = False, cuda: bool | None = None) -> str:
    what = {"subject": subject_dict(subject, cuda), "code": code_version(),
            "data": data_fingerprint(None if data_dir is None else str(data_dir))}
    protocol = evaluation_protocol(subject, amp)
    if protocol:  # a sampled record never shares a key with a whole-set one, of this release or an older one
        what["evaluation"] = protocol
    if isinstance(subject, TrainConfig) and subject.data not in (*REGISTRY, *BUILT_SOURCES):  # a user's file: content
        what["training_file_md5"] = md5_file(Path(subject.data))
    if isinstance(subject, TrainConfig) and subject.dev_data:  # a dev set of one's own: its content
        what["dev_data_md5"] = md5_file(Path(subject.dev_data))
    if isinstance(subject, TrainConfig) and (source := method_digest(method_class(subject.method))):
        what["method_source"] = source  # a researcher's method: editing its module recomputes its runs only
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def content_digest(record: dict) -> str:
    """sha256 of a record's content without its own digest (canonical JSON, as json round-trips it)."""
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


#: field -> type every record has; trained records also have TRAINED_FIELDS
RECORD_FIELDS = {"key": str, "subject": dict, "metrics": dict, "timings": dict, "model_dir": str, "pooler": str,
                 "digest": str}
TRAINED_FIELDS = {"config": dict, "train": dict, "dev_curve": list, "train_curve": list}


def check_record(record, key: str) -> None:
    """Raise CorruptRecord unless record is what this store writes for key: its shape, and its digest."""
    if not isinstance(record, dict):
        raise CorruptRecord(f"it is a JSON {type(record).__name__}, not a record")
    trained = isinstance(record.get("subject"), dict) and record["subject"].get("kind") == "trained"
    fields = {**RECORD_FIELDS, **(TRAINED_FIELDS if trained else {})}
    wrong = [f for f, kind in fields.items() if not isinstance(record.get(f), kind)]
    if wrong:
        raise CorruptRecord(f"it lacks or mistypes {', '.join(wrong)}")
    if record["key"] != key:
        raise CorruptRecord(f"it holds key {record['key']}, not {key}")
    if record["digest"] != content_digest(record):
        raise CorruptRecord("its content does not match its digest (edited after it was written)")


def default_results_dir() -> Path:
    """`CSE_KIT_RESULTS`, else reports/results in the repository."""
    env = os.environ.get("CSE_KIT_RESULTS")
    return Path(env).expanduser() if env else PACKAGE.parent / "reports" / "results"


class CorruptRecord(ValueError):
    pass


class UnreadableRecord(ValueError):
    """A record file that is not JSON: replaced (by a pickle, say) or damaged on disk, never written so by the store."""

    def __init__(self, path: Path):
        super().__init__(f"result record {path} is not JSON, so the results store did not write it (its writes are "
                         f"atomic): someone replaced it or the disk damaged it, and it is never read; look at it, then "
                         f"move it out of {path.parent} or delete it, and run again to recompute it")


def read_record(path: Path):
    """The JSON in a record file (UnreadableRecord where there is none)."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UnreadableRecord(path) from None


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
        evaluate under AMP, in records keyed apart (evaluation_protocol); None: $CSE_KIT_EVAL_AMP. cuda: whether its
        runs train on a GPU (their keys say the precision they train in: subject_dict), None for this machine; True
        for a SLURM submitter on a node without one whose jobs get GPUs (results.parallel.jobs_get_gpus)."""
        self.root = Path(results_dir) if results_dir else default_results_dir()
        self.data_dir = str(resolve_data_dir(data_dir))
        self.force, self.progress = force, progress
        self.amp = evaluation_amp() if amp is None else amp
        self.cuda = cuda
        self.notify = notify or (lambda message: warnings.warn(message, stacklevel=3))
        self.announce = notify or print  # a training run's header line
        self.status = status
        self._recomputed: set[str] = set()

    def key(self, subject: TrainConfig | Pretrained) -> str:
        return record_key(subject, self.data_dir, self.amp, self.cuda)

    def record_path(self, key: str) -> Path:
        return self.root / "records" / f"{key}.json"

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

    def check_readable(self) -> None:
        """Raise UnreadableRecord for the first record of this store that is not JSON (before a report runs)."""
        for path in sorted((self.root / "records").glob("*.json")):
            read_record(path)

    def run_dir(self, key: str) -> Path:
        return self.root / "runs" / key

    def stale(self) -> dict[str, list[str]]:
        """{key: why} of this store's records computed under other major.minor versions of the libraries that decide
        numbers than this environment's (cse_kit.environment.stale_versions); unreadable records are left to
        check_readable."""
        out = {}
        for path in sorted((self.root / "records").glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            reasons = stale_versions(record.get("environment") or {}) if isinstance(record, dict) else []
            if reasons:
                out[path.stem] = reasons
        return out

    def discard_stale(self) -> list[str]:
        """Remove every stale record (and its run folder), so the notebooks that show it compute it again; the
        others are kept and reused. Returns their keys."""
        stale = list(self.stale())
        for key in stale:
            with self.lock(key):
                self._discard(key)
        return stale

    def has(self, subject: TrainConfig | Pretrained, evals=("sts_test",)) -> bool:
        """Whether subject's record is finished with every evaluation in evals (read only: no lock, nothing moved)."""
        return self.has_key(self.key(subject), evals)

    def has_key(self, key: str, evals=("sts_test",)) -> bool:
        try:
            record = json.loads(self.record_path(key).read_text())
            check_record(record, key)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, CorruptRecord):
            return False
        return self._exported_pooler(record) is None and all(evaluation_name(e) in record["metrics"] for e in evals)

    def _exported_pooler(self, record: dict) -> str | None:
        """The pooler a trained record's model states (cse_kit.json) where the record was evaluated with another: its
        training pooler, as records made before the store read the export were (ConSERT trains on `avg` and is
        tested on `avg_top2`; supervised SimCSE tests with its MLP as the model's pooler, `cls`). None otherwise."""
        from ..train.export import ExportSettings

        if record["subject"]["kind"] != "trained":
            return None
        stated = ExportSettings(self.run_dir(record["key"]) / "model").pooler
        return stated if stated and stated != record["pooler"] else None

    def get(self, subject: TrainConfig | Pretrained, evals=("sts_test",)) -> dict:
        """The record of subject with every evaluation in evals (names of EVALUATIONS, or a researcher's tasks,
        cse_kit.eval.user_tasks.UserTask): reused where finished, computed where not."""
        unknown = [e for e in evals if not isinstance(e, UserTask) and e not in EVALUATIONS]
        if unknown:
            raise ValueError(f"unknown evaluation(s) {unknown}; choose from {', '.join(EVALUATIONS)}, or a task of "
                             "your own (cse_kit.eval.user_tasks.UserTask)")
        run = {**EVALUATIONS, **{e.evaluation: _user_task(e) for e in evals if isinstance(e, UserTask)}}
        evals = [evaluation_name(e) for e in evals]
        key = self.key(subject)
        lock = self.lock(key)
        acquire_or_wait(lock, f"waiting for run {key}: another process is computing it", self.notify)
        try:
            if self.force and key not in self._recomputed:
                self._discard(key)
                self._recomputed.add(key)
            record = self._load(key) or self._new_record(key, subject)
            missing = with_shared_encodings([e for e in evals if e not in record["metrics"]], record)
            if missing:
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
                if record["subject"]["kind"] == "trained":  # the test numbers beside the run's curves
                    log_evaluations(self.run_dir(key), {name: record["metrics"][name] for name in missing},
                                    self.announce)
            return record
        finally:
            lock.release()

    def run_of_model(self, model_dir) -> str | None:
        """The key of this store's trained run whose exported model model_dir is (<root>/runs/<key>/model), or None."""
        path = Path(model_dir).expanduser().resolve()
        if path.name == "model" and path.parent.parent == (self.root / "runs").resolve() \
                and self.record_path(path.parent.name).is_file():
            return path.parent.name
        return None

    def get_mteb(self, target, tasks: list, *, encoder=None, force: bool = False) -> tuple[dict, list[str]]:
        """The record of target (a subject, or the key of a record in this store) with an MTEB result for every task
        (mteb tasks: cse_kit.eval.mteb_eval.resolve_tasks) in its metrics' `mteb`, by task name. A stored result of the
        same mteb version, data revision, wrapper and encoding is reused unless force; the others run one task at a
        time through mteb, the record written after each (an interrupted run keeps the tasks it finished). encoder:
        the record's model ready to encode (default: ResultStore.encoder). Returns (record, the names reused)."""
        from ..eval.mteb_eval import evaluate_tasks

        key = target if isinstance(target, str) else self.key(target)
        with self.lock(key):
            record = self._load(key) or (None if isinstance(target, str) else self._new_record(key, target))
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

    def _new_record(self, key: str, subject) -> dict:
        record = {"key": key, "subject": subject_dict(subject, self.cuda), "profile": subject.profile,
                  "seed": getattr(subject, "seed", None), "code_version": code_version(), "git_commit": git_commit(),
                  "data_checksums": data_checksums(), "environment": describe(), "metrics": {}, "timings": {},
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **({"evaluation_amp": True} if self.amp else {})}
        if isinstance(subject, TrainConfig):
            if source := method_digest(method_class(subject.method)):
                record["method_source"] = source  # a researcher's method: which version of its module trained it
            record.update(self._train(key, subject))
        else:
            record["model_dir"], record["pooler"] = subject.model, subject.pooler
        self._write(record)
        return record

    def _train(self, key: str, cfg: TrainConfig) -> dict:
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
        summary = train(cfg, progress=self.progress, announce=self.announce, status=self.status)
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
        from ..models import load_model
        from ..train.export import ExportSettings
        from ..train.loop import load_encoder

        model_dir = record["model_dir"]
        if record["subject"]["kind"] == "trained":  # under this store's root, wherever the store was trained
            model_dir = str(self.run_dir(record["key"]) / "model")
            if not Path(model_dir).is_dir():
                raise FileNotFoundError(f"the trained model of record {record['key']} is gone ({model_dir}); "
                                        "rerun with force=True to retrain it")
        # `cls` reads the model's pooler layer (supervised SimCSE's MLP), which the training encoder is built without
        tokenizer, model = load_model(model_dir) if record["pooler"] == "cls" else load_encoder(model_dir)
        stated = ExportSettings(model_dir)
        return Encoder(model, tokenizer, record["pooler"], progress=self.progress, template=stated.prompt,
                       max_length=stated.max_length, amp=bool(record.get("evaluation_amp")))


#: The evaluation_sample kinds: how much of the STS test and of the transfer sets an evaluation reads.
SAMPLES = ("sts_sample", "transfer_sample")


def evaluation_sample(profile: str | None, kind: str) -> int | None:
    """How much of the evaluation sets a profile's `kind` evaluations read (None: all, as SentEval):
    "transfer_sample" records per transfer split, "sts_sample" STS test pairs per subset. Only the smoke profile
    samples: it checks the pipeline, and its tiny models would otherwise spend most of a smoke report encoding the
    108k transfer sentences (and fitting classifiers on them) and the 27k STS test sentences."""
    from ..train.presets import PROFILES

    return PROFILES.get(profile, {}).get("report", {}).get(kind)


def _sts(mode: str):
    def run(encoder, data_dir, profile):
        from ..eval.runner import evaluate

        if mode != "test":  # STS-B and SICK-R dev whole: what the training's dev evaluation selects on
            return evaluate(encoder, ("STSBenchmark", "SICKRelatedness"), mode, data_dir)["sts"]
        sample = evaluation_sample(profile, "sts_sample")
        result = evaluate(encoder, "sts", mode, data_dir, sts_sample=sample)["sts"]
        return {**result, **({"sample_per_subset": sample} if sample else {})}
    return run


def _transfer(mode: str):
    def run(encoder, data_dir, profile):
        from ..eval.runner import evaluate

        sample = evaluation_sample(profile, "transfer_sample")
        result = evaluate(encoder, "transfer", mode, data_dir, transfer_sample=sample)["transfer"]
        return {**result, "mode": mode, **({"sample_per_split": sample} if sample else {})}
    return run


def _geometry(encoder, data_dir, profile) -> dict:
    from ..data import load_sts
    from ..eval.geometry import align_uniform, nearest, retrieval_recall, similarity_by_gold_bin
    from ..data.published import paper_examples

    queries = paper_examples(9)["queries"]
    pool = list(dict.fromkeys(s for p in load_sts("STSBenchmark", "test", data_dir) for s in (p.sent1, p.sent2)))
    return {"align_uniform": align_uniform(encoder, data_dir), "gold_bins": similarity_by_gold_bin(encoder, data_dir),
            "retrieval": retrieval_recall(encoder, data_dir),
            "nearest": {q: found for q, found in zip(queries, nearest(encoder, queries, pool))}}


def _sts_pairs(encoder, data_dir, profile) -> dict:
    from ..eval.sts import test_similarities

    return test_similarities(encoder, data_dir)


def _geometry_sts_filter(encoder, data_dir, profile) -> dict:
    from ..eval.geometry import sts_filter_align_uniform

    return {"align_uniform": sts_filter_align_uniform(encoder, data_dir)}


def _user_task(task: UserTask):
    """A researcher's task as an EVALUATIONS function."""
    return lambda encoder, data_dir, profile: evaluate_user_task(encoder, task)


def evaluation_name(evaluation) -> str:
    """An evaluation's name in a record's metrics (a researcher's task's holds its file's checksum)."""
    return evaluation.evaluation if isinstance(evaluation, UserTask) else evaluation


#: evaluation -> the evaluations that read no sentence it does not: computed with it, from its encodings, where it
#: reads whole sets (a notebook's STS test numbers, then the head-to-head's per-pair cosines of the same pairs; not
#: the other way: the STS test also reads STS-B's and SICK-R's dev sets, which the head-to-head never needs, and the
#: report runs the head-to-head last)
SHARED_ENCODINGS = {"sts_test": ("sts_pairs",)}


def with_shared_encodings(missing: list[str], record: dict) -> list[str]:
    """`missing` and, where its profile evaluates the STS test sets whole, every SHARED_ENCODINGS companion the record
    lacks: one encoder computes them all, each sentence encoded once (a sampled STS test, smoke's, would have to
    encode the rest of the sets for them)."""
    if evaluation_sample(record.get("profile"), "sts_sample") is not None:
        return missing
    extra = [c for name in missing for c in SHARED_ENCODINGS.get(name, ())
             if c not in record["metrics"] and c not in missing]
    return missing + list(dict.fromkeys(extra))


#: name -> fn(encoder, data_dir, the subject's profile) -> metrics. `geometry_sts_filter`: SCD Figure 2's alignment and uniformity, computed
#: as SCD's official sts_filter.py does (beside `geometry`'s Wang & Isola definitions); `sts_pairs`: every STS test
#: pair's cosine, for the paired bootstrap of cse_kit.papers.comparison
EVALUATIONS = {"sts_test": _sts("test"), "sts_dev": _sts("dev"), "transfer_dev": _transfer("dev"),
               "transfer_fasttest": _transfer("fasttest"), "transfer_test": _transfer("test"), "geometry": _geometry,
               "geometry_sts_filter": _geometry_sts_filter, "sts_pairs": _sts_pairs}
