"""Equal tuning budget: a method's settings searched with Optuna (seeded TPE), every trial a run of the results store,
its objective the run's own checkpoint-selection dev score (`metric`, STS-B dev by default), so a study reads no test
set. Only the chosen configuration is then tested, over seeds (chosen_on_test).

A study is named by what it searches (preset, profile, base settings, space, seed, metric) and stored in Optuna's
storage: by default a SQLite file beside the results store, a URL for a lab's database (postgresql://...), or
`journal:PATH`, Optuna's journal file for a shared file system. `trials` is the study's total: a rerun that finds
them finished samples nothing, and a trained trial is a store record, so it never trains twice. Workers (local
processes, or SLURM jobs sent as the report's are) share one study: they ask for trials under a lock beside the
store, so the study holds exactly `trials` trials that count (complete, running or waiting). A worker holds a trial
lock (beside the store's) from asking for a trial to telling its outcome; the kernel releases it when the worker
dies, so the next worker to ask finds a killed worker's trial at once, marks it failed and enqueues its parameters
again: it is run again, its run read from the store or resumed from its checkpoint, never lost or counted twice. A
worker sharing the storage but not the store is judged by its heartbeat (RetryHeartbeatStaleTrialCallback; the
journal file has none: `--fail-running`). A worker that finds the total held waits for the trials live workers
run, so a study it reports is finished. The k-th configuration is drawn by a sampler seeded by the study's seed
and k, not by how many trials were tried, so a study interrupted and resumed draws what an uninterrupted one draws.
Faults of the storage itself (a dropped connection, a restarting server, a damaged file) are study_storage's.
`prune` names Optuna's pruner: it hears the dev score of each evaluation a trial's run
makes while it trains (eval_steps) and may stop the run there; the trial is then PRUNED, its run left unfinished
(its checkpoint of that step, no record), never a finished run. `dashboard` serves optuna-dashboard on the study's
storage while it runs (docs/tuning.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..results import ResultStore, default_results_dir
from ..train.config import METRICS
from ..train.presets import build_config

#: the storage of a study when none is given: beside the results store
DEFAULT_STORAGE = "studies.sqlite3"
#: seconds between a running trial's heartbeats, and after which a silent one is taken for dead
HEARTBEAT = (30, 120)
#: seconds a study's bookkeeping waits for its storage to answer again (a dropped connection, a restarting server)
#: before the command stops in one line (--storage-patience)
PATIENCE = 60.0
#: seconds between looks at the trials a worker waits for (running in another worker, alive)
WAIT_POLL = 2.0
#: what `metric` may not be: a test set (a study selects on dev data only)
TEST_WORDS = ("test",)


class TuneError(ValueError):
    """A study that cannot start, in one line that names the fix."""


@dataclass(frozen=True)
class Dimension:
    """One searched setting: a float range (log or uniform), an integer range, or a list of choices."""

    name: str
    kind: str  # float | int | categorical
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()

    def suggest(self, trial):
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def ends(self) -> list:
        """The values that bound the dimension (each is checked against the setting before a trial runs)."""
        if self.kind == "categorical":
            return list(self.choices)
        return [int(self.low), int(self.high)] if self.kind == "int" else [self.low, self.high]


_RANGE = re.compile(r"^(log|int|intlog)?\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)$")
SPACE_SYNTAX = ("name=log(a,b) (log-uniform float), name=(a,b) (uniform float), name=int(a,b), name=intlog(a,b), "
                "name=[x,y,z] (choices); dimensions separated by ';'")
#: the pruners `--prune` names: Optuna's classes
PRUNERS = {"median": "MedianPruner", "percentile": "PercentilePruner", "hyperband": "HyperbandPruner",
           "successive-halving": "SuccessiveHalvingPruner", "threshold": "ThresholdPruner"}
_PRUNER = re.compile(r"^([a-z-]+)\s*(?:\((.*)\))?$")


def parse_space(text: str) -> list[Dimension]:
    """A space as `cse-kit tune --space` writes it: 'lr=log(1e-5,1e-4); temp=(0.02,0.1); diffcse.lambda_weight=...'."""
    dims = []
    for part in [p.strip() for p in text.split(";") if p.strip()]:
        name, sep, spec = (x.strip() for x in part.partition("="))
        if not sep or not name:
            raise TuneError(f"bad space dimension {part!r}: write {SPACE_SYNTAX}")
        dims.append(_dimension(name, spec, part))
    if not dims:
        raise TuneError(f"the space is empty: write {SPACE_SYNTAX}")
    names = [d.name for d in dims]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise TuneError(f"the space names a setting twice: {', '.join(twice)}")
    return dims


def _dimension(name: str, spec: str, part: str) -> Dimension:
    if spec.startswith("[") and spec.endswith("]"):
        choices = tuple(_value(x.strip()) for x in spec[1:-1].split(",") if x.strip())
        if len(choices) < 2:
            raise TuneError(f"{part!r}: a list of choices needs two or more")
        return Dimension(name, "categorical", choices=choices)
    match = _RANGE.match(spec)
    if not match:
        raise TuneError(f"bad space dimension {part!r}: write {SPACE_SYNTAX}")
    how, low, high = match.groups()
    try:
        low, high = float(low), float(high)
    except ValueError:
        raise TuneError(f"{part!r}: the bounds must be numbers") from None
    if not low < high:
        raise TuneError(f"{part!r}: the lower bound must be below the upper")
    log = how in ("log", "intlog")
    if log and low <= 0:
        raise TuneError(f"{part!r}: a log range needs a lower bound > 0")
    if how in ("int", "intlog"):
        if low != int(low) or high != int(high):
            raise TuneError(f"{part!r}: an integer range needs integer bounds")
        return Dimension(name, "int", low, high, log)
    return Dimension(name, "float", low, high, log)


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text.strip("'\""))


def pruner(spec: str | None):
    """Optuna's pruner that `--prune` names: NAME or NAME(key=value, ...) with the class's own arguments
    (median(n_startup_trials=5, n_warmup_steps=100)); None: no pruning."""
    import optuna

    if not spec:
        return optuna.pruners.NopPruner()
    match = _PRUNER.match(spec.strip())
    if not match or match.group(1) not in PRUNERS:
        raise TuneError(f"--prune {spec}: name one of {', '.join(PRUNERS)}, with the arguments of its Optuna class "
                        "if any: median(n_startup_trials=5, n_warmup_steps=100)")
    name, args = match.groups()
    kwargs = {}
    for part in [a.strip() for a in (args or "").split(",") if a.strip()]:
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not key.isidentifier():
            raise TuneError(f"--prune {spec}: write the arguments as key=value, separated by commas")
        kwargs[key] = _value(value)
    cls = getattr(optuna.pruners, PRUNERS[name])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise TuneError(f"--prune {spec}: optuna.pruners.{cls.__name__} refuses it ({error})") from None


def _setting(name: str, value) -> str:
    return f"{name}={value!r}" if isinstance(value, float) else f"{name}={value}"


@dataclass
class Study:
    """What a study searches and where it is kept (everything a worker process needs)."""

    preset: str
    profile: str
    space: list
    trials: int
    overrides: list  # `key=value` settings every trial takes
    seed: int
    results_dir: str | None
    data_dir: str | None
    storage: str | None = None  # None: DEFAULT_STORAGE beside the results store
    name: str | None = None  # None: named by what it searches
    heartbeat: tuple = HEARTBEAT
    prune: str | None = None  # Optuna's pruner (pruner()); None: every trial's run trains to its end
    patience: float = PATIENCE  # seconds the study's bookkeeping waits for a storage that stopped answering

    def __post_init__(self):
        self.space = [d if isinstance(d, Dimension) else Dimension(**{**d, "choices": tuple(d.get("choices", ()))})
                      for d in self.space]
        self.name = self.name or self.default_name()

    def default_name(self) -> str:
        what = {"preset": self.preset, "profile": self.profile, "overrides": sorted(self.overrides),
                "space": [asdict(d) for d in self.space], "seed": self.seed}
        if self.prune:  # its trials may end unfinished: another study (one without keeps the name it had)
            what["prune"] = self.prune
        return f"{self.preset}-{self.profile}-{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:10]}"

    def config(self, params: dict, seed: int | None = None):
        """The run of a trial's parameters (the study's seed unless another is given)."""
        seed = self.seed if seed is None else seed
        settings = [*self.overrides, *(_setting(k, v) for k, v in params.items()), f"seed={seed}"]
        return build_config(self.preset, self.profile, settings)

    def store(self, notify=None) -> ResultStore:
        return ResultStore(self.results_dir, self.data_dir, notify=notify or (lambda line: None))

    def root(self) -> Path:
        """The results store's folder, as ResultStore resolves it (without opening the store: asked every trial)."""
        return Path(self.results_dir) if self.results_dir else default_results_dir()

    def storage_url(self) -> str:
        if self.storage:
            from .study_storage import with_driver

            return with_driver(self.storage)
        root = self.root()
        root.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(root / DEFAULT_STORAGE).resolve()}"

    def lock_path(self) -> Path:
        return self.root() / "locks" / f"study-{self.name}.lock"

    def trial_lock_path(self, number: int) -> Path:
        """The lock a worker holds from asking for trial `number` to telling its outcome: an OS lock the kernel
        releases when the worker dies, so a free one on a running trial means its worker is gone."""
        return self.root() / "locks" / f"trial-{self.name}-{number}.lock"


def check(study: Study) -> None:
    """Everything that would stop a trial, refused in one line before any runs: a setting the method does not have,
    a bound the setting does not accept, a test set as the objective, a storage that does not answer."""
    base = study.config({})
    if any(word in base.metric for word in TEST_WORDS) or base.metric not in METRICS:
        raise TuneError(f"a study selects on dev data only: metric {base.metric!r} is not one of {', '.join(METRICS)}")
    for dim in study.space:
        for value in dim.ends():
            try:
                study.config({dim.name: value})
            except (TypeError, ValueError) as error:
                raise TuneError(f"space dimension {dim.name}: {value!r} is refused by the run ({error})") from None
    pruner(study.prune)
    open_storage(study)


def open_storage(study: Study):
    """Optuna's storage of the study: RDB (SQLite, PostgreSQL...) with a heartbeat that re-runs a dead worker's trial,
    patient with a storage that stops answering (study_storage), or a journal file; one line naming the URL where it
    does not answer, and one saying so where a SQLite study file is damaged."""
    from . import study_storage

    _quiet_optuna()
    url = study.storage_url()
    try:
        if url.startswith("journal:"):
            import optuna
            from optuna.storages.journal import JournalFileBackend

            return optuna.storages.JournalStorage(JournalFileBackend(url.partition(":")[2]))
        # workers sharing the results store create a new storage one at a time (SQLite's and PostgreSQL's table
        # creation race otherwise); a worker elsewhere is tried again
        return study_storage.open_rdb(url, study.heartbeat, study.patience,
                                      study.root() / "locks" / "study-storage.lock")
    except study_storage.DamagedStudyFile:
        raise
    except Exception as error:  # sqlalchemy's and the driver's errors: a storage that cannot be reached or read
        words = str(error).splitlines()[0][:300]
        raise TuneError(f"the study's storage {study_storage.safe(url)} does not answer ({type(error).__name__}: "
                        f"{words}); check the URL, that the database runs and that its driver is installed "
                        "(PostgreSQL: pip install 'psycopg[binary]')") from None


def _quiet_optuna() -> None:
    """Optuna's notes on its experimental heartbeat and on heartbeats outside Study.optimize: the kit asks and tells
    itself (next_trial, under a lock) and runs the heartbeat as optimize does (work)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def load(study: Study):
    import optuna

    return optuna.create_study(study_name=study.name, storage=open_storage(study), sampler=sampler(study.seed, 0),
                               pruner=pruner(study.prune), direction="maximize", load_if_exists=True)


def sampler(seed: int, place: int):
    """Optuna's TPE, seeded by the study's seed and the place of the trial it draws."""
    import optuna

    return optuna.samplers.TPESampler(seed=seed * 1_000_003 + place)


def next_trial(study: Study, optuna_study, say=None):
    """(a trial to run, its trial lock held), or None when the study holds its total: asked under the study's lock,
    after the trials of dead workers are failed and their parameters enqueued again (orphaned: their trial lock is
    free; or silent past the heartbeat's grace), so two workers never overshoot the total."""
    import optuna
    from filelock import FileLock

    from optuna.trial import TrialState

    from ..io import holder_lock

    path = study.lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        optuna.storages.fail_stale_trials(optuna_study)  # a storage without heartbeats (the journal) has none
        trials = optuna_study.get_trials(deepcopy=False)  # read once: nothing else asks while the lock is held
        if run_orphans_again(study, optuna_study, trials, say or _say):
            trials = optuna_study.get_trials(deepcopy=False)
        waiting = any(t.state == TrialState.WAITING for t in trials)
        # the trials that count toward the total (a failed trial is replaced)
        counted = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
                      for t in trials)
        if not waiting and counted >= study.trials:
            return None
        # the sampler seeded by the place of the configuration it draws: workers (each with its own sampler) never
        # draw the same parameters, and the k-th configuration is drawn the same way whichever worker asks and
        # whatever interrupted the study (a trial run again is no new draw)
        optuna_study.sampler = sampler(study.seed, drawn(trials))
        trial = optuna_study.ask()
        lock = holder_lock(str(study.trial_lock_path(trial.number)))
        lock.acquire(timeout=0)  # a new number: nobody else holds it
        return trial, lock


def drawn(trials: list) -> int:
    """How many configurations the sampler drew for the study so far: its trials, less those run again with a dead
    worker's parameters (Optuna's retry callbacks mark them `failed_trial`)."""
    return sum("failed_trial" not in t.system_attrs for t in trials)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_orphans_again(study: Study, optuna_study, trials: list, say) -> int:
    """Fail each running trial whose worker is gone (its trial lock is free: the kernel released it when the worker
    died, on this host or another sharing the store) and enqueue its parameters again, whatever the heartbeat: the
    trial's run is reused from the store, or resumed from its checkpoint. How many. A running trial without a trial
    lock in this store (a worker that does not share it) is the heartbeat's to judge."""
    from optuna.trial import TrialState

    from ..io import describe_holder, lock_holder

    again = 0
    for trial in trials:
        path = study.trial_lock_path(trial.number)
        if trial.state == TrialState.RUNNING and path.is_file() and _run_again_if_free(study, optuna_study, trial):
            say(f"trial {trial.number} was left running by {describe_holder(lock_holder(path))}, which is gone: it "
                "is run again (its run reused from the store, or resumed from its checkpoint)")
            again += 1
    return again


def _run_again_if_free(study: Study, optuna_study, trial) -> bool:
    """Where no live worker holds running `trial` (its trial lock is free), mark it failed and enqueue its
    parameters again (Optuna's retry callback: the new trial is marked `failed_trial`); whether it did."""
    from filelock import FileLock, Timeout
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    from .study_storage import RETRIES

    path = study.trial_lock_path(trial.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    probe = FileLock(str(path))  # not a holder lock: the file keeps saying who held it
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return False  # its worker is alive
    try:
        current = [t for t in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                   if t.number == trial.number]
        if not current:  # told between the caller's read and the lock
            return False
        optuna_study.tell(trial.number, state=TrialState.FAIL)
        # the callback the heartbeat runs for a silent trial: the same retry, counted the same way
        RetryHeartbeatStaleTrialCallback(max_retry=RETRIES)(optuna_study, current[0])
        return True
    finally:
        probe.release()


def still_running(study: Study, optuna_study) -> tuple[list[str], list[str]]:
    """The study's running trials after the orphans are failed, as `trial N (pid P on host H since ...)`: (those whose
    worker holds their trial lock, alive; those without a trial lock in this store, for the heartbeat to judge)."""
    from optuna.trial import TrialState

    from ..io import describe_holder, lock_holder

    alive, unjudged = [], []
    for t in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        path = study.trial_lock_path(t.number)
        (alive if path.is_file() else unjudged).append(f"trial {t.number} ({describe_holder(lock_holder(path))})")
    return alive, unjudged


def fail_running(study: Study) -> int:
    """Mark the study's running trials failed and enqueue their parameters again, but those a live worker holds (its
    trial lock); how many. For a killed worker's trial that no trial lock judges (an older kit's) where the storage
    has no heartbeat (the journal file): only while none of the study's workers runs."""
    from optuna.trial import TrialState

    optuna_study = load(study)
    return sum(_run_again_if_free(study, optuna_study, trial)
               for trial in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def run_trial(study: Study, trial, store: ResultStore) -> float:
    """Train the trial's run in the store (a run it has is read, not trained) and return its dev score. Where the
    study prunes, each dev evaluation of the run is reported to the trial, and a run the pruner stops raises
    optuna.TrialPruned (its run keeps the checkpoint of that step; the store has no record of it)."""
    import optuna

    from ..train.loop import TrainingPruned

    params = {dim.name: dim.suggest(trial) for dim in study.space}
    cfg = study.config(params)
    key = store.key(cfg)
    with _saying_what_is_kept(store, key, trial.number):
        trial.set_user_attr("key", key)
        start = time.perf_counter()
        try:
            record = store.get(cfg, (), on_dev=_reporter(trial) if study.prune else None)
        except TrainingPruned as pruned:
            trial.set_user_attr("seconds", time.perf_counter() - start)
            raise optuna.TrialPruned(str(pruned)) from None
        trial.set_user_attr("seconds", time.perf_counter() - start)
        trial.set_user_attr("steps", record["train"]["steps"])
        trial.set_user_attr("train_seconds", record.get("timings", {}).get("train_train_s"))
        return float(record["train"]["best"])


@contextlib.contextmanager
def _saying_what_is_kept(store: ResultStore, key: str | None, number: int | None):
    """A storage that stays away, said with what became of trial `number`'s run (None: between trials) and how to
    go on."""
    from .study_storage import StorageAway

    try:
        yield
    except StorageAway as away:
        if key is not None and store.record_path(key).is_file():
            kept = (f"trial {number}'s run is stored ({store.run_dir(key)}): run the same command again when the "
                    "storage answers, and the trial takes its run from the store, nothing retrained")
        elif key is not None and (store.run_dir(key) / "checkpoints").is_dir():
            kept = (f"trial {number}'s run keeps its last checkpoint ({store.run_dir(key)}): run the same command "
                    "again when the storage answers, and it resumes from there")
        elif number is not None:
            kept = f"trial {number} had trained nothing yet: run the same command again when the storage answers"
        else:
            kept = "no trial of this worker was running: run the same command again when the storage answers"
        raise StorageAway(f"{away}; {kept}") from None


def _reporter(trial):
    """train()'s on_dev for a trial: each dev score reported at its step; whether the study's pruner stops it."""
    def on_dev(step: int, score: float) -> bool:
        trial.report(score, step)
        return trial.should_prune()

    return on_dev


def work(study: Study, say=_say) -> int:
    """One worker: trials until the study holds its total and no live worker runs one of them (it waits for those,
    so a study it ends is finished); the number it ran."""
    optuna_study, store, ran, waited = load(study), study.store(), 0, None
    while True:
        with _saying_what_is_kept(store, None, None):
            asked = next_trial(study, optuna_study, say)
            alive, unjudged = still_running(study, optuna_study) if asked is None else ([], [])
        if asked is not None:
            trial, lock = asked
            try:
                ran += run_and_tell(study, optuna_study, trial, store, say)
            finally:
                lock.release()
            continue
        if not alive:
            if unjudged:
                say(f"{', '.join(unjudged)} still running without a worker this results store knows: the heartbeat "
                    f"runs it again after {study.heartbeat[1]} s without a beat (run the same command again then), "
                    "or --fail-running where the storage has no heartbeat (journal:) and none of its workers runs")
            return ran
        if alive != waited:
            say(f"waiting for {', '.join(alive)}: the study's total is held until it ends")
            waited = alive
        time.sleep(WAIT_POLL)


def run_and_tell(study: Study, optuna_study, trial, store: ResultStore, say) -> int:
    """Run one trial and tell the study its outcome; 1 where it counts toward the total (complete or pruned)."""
    import optuna
    from optuna.storages._heartbeat import get_heartbeat_thread  # what study.optimize runs around each trial
    from optuna.trial import TrialState

    from .study_storage import DamagedStudyFile, StorageAway

    try:
        with get_heartbeat_thread(trial._trial_id, optuna_study._storage):
            value = run_trial(study, trial, store)
    except optuna.TrialPruned:  # counted in the total with the last dev score it reported
        optuna_study.tell(trial, state=TrialState.PRUNED)
        return 1
    except (StorageAway, DamagedStudyFile):  # the storage's fault, not the trial's: nothing to tell it
        raise
    except Exception as error:  # a run that fails is a failed trial, replaced by another; the study goes on
        optuna_study.tell(trial, state=TrialState.FAIL)
        trial_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        say(f"trial {trial.number} failed: {trial_error}")
        return 0
    with _saying_what_is_kept(store, trial.user_attrs.get("key"), trial.number):
        optuna_study.tell(trial, value)
    return 1


def run(study: Study, workers: int = 1, cluster: str = "local", say=print) -> list[dict]:
    """The study to its total with `workers` local processes (1: this one) or SLURM jobs; its trials, as summary()
    gives them. No worker starts where every trial has finished."""
    check(study)
    needed = min(workers, unfinished(study, load(study)))  # load: created once, before the workers race to create it
    if needed and cluster == "slurm":
        slurm_workers(study, needed, say)
    elif needed == 1:
        work(study)
    elif needed:
        local_workers(study, needed, say)
    return summary(study)


def unfinished(study: Study, optuna_study) -> int:
    """How many trials of the total have no outcome yet (to run, running, or a dead worker's to run again)."""
    from optuna.trial import TrialState

    return study.trials - len(optuna_study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def local_workers(study: Study, workers: int, say) -> None:
    spec = json.dumps({**asdict(study), "space": [asdict(d) for d in study.space]})
    procs = [subprocess.Popen([sys.executable, "-m", "cse_kit.experiments.tuning", spec]) for _ in range(workers)]
    codes = [p.wait() for p in procs]
    if any(codes):
        say(f"{sum(1 for c in codes if c)} of {workers} workers stopped early (exit {max(codes)}); rerun the same "
            "command to finish the study")


def slurm_workers(study: Study, workers: int, say) -> None:
    """`workers` SLURM jobs on the study, sent as the report's worker jobs are (submitit, cse_kit.results.parallel:
    $CSE_KIT_EXECUTOR_PARAMS, the private jobs folder, a GPU only for the paper profile). Each job is the study's
    worker (work) with the store and storage resolved here: a node may have another working directory and
    environment. A job that fails leaves its trial to the heartbeat and to a rerun."""
    from ..methods.registry import check_sendable
    from ..results import parallel

    base = study.config({})
    check_sendable(base.method)  # a notebook's own method cannot train in a job
    sent = sent_to_jobs(study)
    folder = parallel.jobs_dir(sent.results_dir)
    jobs = [executor.submit(work, sent)
            for executor in parallel.executors(folder, workers, "slurm", parallel.job_resources([(base, ())]))]
    say(f"study {study.name}: {workers} SLURM jobs ({', '.join(j.job_id for j in jobs)}); logs in {folder}")
    ended = parallel.wait_quietly(jobs)
    failed = [job for job in jobs if job not in ended or not _answered(job)]
    if failed:
        say(f"{len(failed)} of {workers} jobs ended without finishing (log: {failed[0].paths.stderr}); rerun the "
            "same command to finish the study")


def sent_to_jobs(study: Study) -> Study:
    """The study as SLURM jobs get it: the store and storage resolved here (a node may have another working
    directory and environment), and the trials' precision resolved for the jobs' device as the report's workers
    resolve theirs (parallel.for_workers): every trial, wherever it trains, is the run the submitter keys, so the
    chosen configuration's seeds (chosen_on_test) find the winning trial's run. Its name is the study's."""
    from dataclasses import replace

    from ..results import parallel

    store, base = study.store(), study.config({})
    precision = parallel.for_workers(base, "slurm").mixed_precision
    resolved = [f"mixed_precision={precision}"] if precision != base.mixed_precision else []
    return replace(study, results_dir=str(store.root), data_dir=str(store.data_dir), storage=study.storage_url(),
                   overrides=[*study.overrides, *resolved])


def _answered(job) -> bool:
    try:
        job.result()
        return True
    except Exception:  # a job's own failure: its log says why
        return False


@contextlib.contextmanager
def dashboard(study: Study, address: str):
    """optuna-dashboard serving the study's storage at http://HOST:PORT (address `PORT` or `HOST:PORT`, 127.0.0.1
    unless given) from a thread of this process, while the block runs; yields its URL."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    try:
        import optuna_dashboard
    except ImportError:
        raise TuneError("--dashboard needs optuna-dashboard: pip install 'cse-kit[tune]'") from None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise TuneError(f"--dashboard {address}: give a port (8080) or a host and port (0.0.0.0:8080)")

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):  # one line per request would bury the study's own lines
            pass

    try:
        server = make_server(host or "127.0.0.1", int(port), optuna_dashboard.wsgi(open_storage(study)), Server, Quiet)
    except OSError as error:
        raise TuneError(f"--dashboard {address}: cannot listen there ({error.strerror}); choose another port") from None
    thread = threading.Thread(target=server.serve_forever, name="optuna-dashboard", daemon=True)
    thread.start()
    try:
        yield f"http://{host or '127.0.0.1'}:{server.server_port}/dashboard"
    finally:
        server.shutdown()
        server.server_close()


def summary(study: Study) -> list[dict]:
    """Every trial of the study: number, state, dev score, parameters, its run's key."""
    optuna_study = load(study)
    return [{"number": t.number, "state": t.state.name.lower(), "value": t.value, "params": t.params,
             "key": t.user_attrs.get("key"), "train_seconds": t.user_attrs.get("train_seconds"),
             "seconds": t.user_attrs.get("seconds"), "dev_curve": dict(sorted(t.intermediate_values.items()))}
            for t in optuna_study.get_trials(deepcopy=False)]


def chosen(trials: list[dict]) -> dict | None:
    """The complete trial with the best dev score among `trials` (as summary() gives them), or None."""
    done = [t for t in trials if t["state"] == "complete"]
    return max(done, key=lambda t: t["value"]) if done else None


def best(study: Study, trials: list[dict] | None = None) -> dict:
    """The study's chosen trial (chosen), from `trials` where the caller has them (summary(study) otherwise)."""
    found = chosen(summary(study) if trials is None else trials)
    if found is None:
        raise TuneError(f"study {study.name} has no complete trial yet: run it (cse-kit tune ...)")
    return found


def chosen_on_test(study: Study, seeds: list[int], evaluations=("sts_test",), workers: int = 1,
                   cluster: str = "local") -> list[dict]:
    """The chosen configuration trained (or read) over seeds and tested: the study's only test-set reads. With
    workers (local processes or SLURM jobs, as the report's: parallel.compute_all) the runs the store lacks are
    computed by them first, in the precision the study's jobs trained in (sent_to_jobs)."""
    from ..results import parallel

    params, store = best(study)["params"], study.store()
    runs = [parallel.for_workers(study.config(params, seed), cluster) for seed in seeds]
    if parallel.uses_workers(workers, cluster):
        parallel.compute_all(store, [(cfg, evaluations) for cfg in runs], workers, cluster)
    return [store.get(cfg, evaluations) for cfg in runs]


def trial_table(trials: list[dict]) -> str:
    """The trials as lines a terminal shows."""
    lines = [f"{'trial':>5}  {'state':<8} {'dev':>8}  settings"]
    for t in trials:
        value = "" if t["value"] is None or (isinstance(t["value"], float) and math.isnan(t["value"])) else \
            f"{t['value']:.4f}"
        params = " ".join(_setting(k, v) for k, v in t["params"].items())
        lines.append(f"{t['number']:>5}  {t['state']:<8} {value:>8}  {params}")
    return "\n".join(lines)


if __name__ == "__main__":  # a worker process of run()
    spec = json.loads(sys.argv[1])
    spec["heartbeat"] = tuple(spec["heartbeat"])
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        work(Study(**spec))
    except ValueError as error:  # the storage away or damaged (what was kept), a study refused: one line
        _say(f"cse-kit tune worker: {error}")
        sys.exit(2)
