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
again (queue_again): it is run again, its run read from the store or resumed from its checkpoint, never lost or
counted twice; a configuration whose worker dies RETRIES times is given up, and said so. The lock decides liveness: a
trial whose lock is held is never failed by the heartbeat (a stopped or slow worker); a worker sharing the storage but
not the store is judged by its heartbeat (the journal file has none: `--fail-running`). A worker that finds the total
held waits for the trials live workers run, so a study it reports is finished.

A study that cannot succeed stops (StudyStopped, one line): a fault of the machine (a full disk, a read-only store)
or of the space (a bound Optuna cannot sample) stops it at once, its trial's configuration queued first for the
rerun; a trial's own failure (a diverged run) is recorded and the study goes on, but `failures` in a row stop the
worker, and never more trials fail than the total. A study is one preset, profile, objective and base settings
(its identity, stored with it); each trial records the space it was drawn from. The k-th configuration is drawn by a sampler seeded by the study's seed
and k, not by how many trials were tried, so a study interrupted and resumed draws what an uninterrupted one draws.
Faults of the storage itself (a dropped connection, a restarting server, a damaged file) are study_storage's.
`prune` names Optuna's pruner: it hears the dev score of each evaluation a trial's run
makes while it trains (eval_steps) and may stop the run there; the trial is then PRUNED, its run left unfinished
(its checkpoint of that step, no record), never a finished run. `dashboard` serves optuna-dashboard on the study's
storage while it runs (docs/tuning.md)."""

from __future__ import annotations

import contextlib
import errno
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
#: a trial's own failures (a diverged run, a bug) in a row after which a worker stops (--failures-in-a-row)
FAILURES_IN_A_ROW = 3
#: a configuration whose worker dies (killed, silent past the heartbeat) this many times is given up
RETRIES = 3
#: errors of the machine, not of a configuration: every trial would fail alike (a full disk or quota, a file too
#: large, a read-only or forbidden store)
MACHINE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is spent",
                  errno.EFBIG: "the file size limit is reached", errno.EROFS: "the store is read-only",
                  errno.EACCES: "the store may not be written", errno.EPERM: "the store may not be written"}
#: a study's name: a file name's letters, no path parts (it names the study's lock files)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class TuneError(ValueError):
    """A study that cannot start, in one line that names the fix."""


class StudyStopped(ValueError):
    """A study that cannot succeed as it is (the machine, the space, a run that keeps failing): one line, what was
    kept and how to go on."""


class SpaceRefused(ValueError):
    """Optuna cannot draw a configuration from the space (a bound it cannot sample)."""


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
    if not math.isfinite(high - low):  # inf, nan, or a width no float holds: nothing can be drawn
        raise TuneError(f"{part!r}: the bounds must be finite numbers, less than 1e308 apart")
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
    failures: int = FAILURES_IN_A_ROW  # a trial's own failures in a row after which a worker stops

    def __post_init__(self):
        self.space = [d if isinstance(d, Dimension) else Dimension(**{**d, "choices": tuple(d.get("choices", ()))})
                      for d in self.space]
        if self.name is not None and not NAME.fullmatch(self.name):
            raise TuneError(f"--study {self.name!r}: a study's name is letters, digits, '.', '_' and '-', starting "
                            "with a letter or digit (it names files under the store's locks/)")
        if self.heartbeat[0] < 1 or self.patience < 0 or self.failures < 1:
            raise TuneError(f"--heartbeat takes 1 s or more, --storage-patience 0 s or more and --failures-in-a-row "
                            f"1 or more, got {self.heartbeat[0]}, {self.patience:g} and {self.failures}")
        self.name = self.name or self.default_name()

    def identity(self) -> dict:
        """What a study is of: one preset, profile, objective (the dev metric) and base settings; its space may
        change between commands (each trial records its own)."""
        return {"preset": self.preset, "profile": self.profile, "metric": self.config({}).metric,
                "settings": sorted(self.overrides)}

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
    _draw_each(study.space)
    pruner(study.prune)
    open_storage(study)


def _draw_each(space: list) -> None:
    """A configuration drawn from the space by Optuna in memory: a bound it cannot sample is refused at the door."""
    import optuna

    _quiet_optuna()
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(0)).ask()
    for dim in space:
        try:
            dim.suggest(trial)
        except (ValueError, OverflowError) as error:
            raise TuneError(f"space dimension {dim.name}: Optuna cannot draw from it ({error})") from None


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
                                      study.root() / "locks" / "study-storage.lock", _run_silent_trial_again)
    except (study_storage.DamagedStudyFile, study_storage.StorageFull):
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
    """The Optuna study, created where new, its identity stored with it; another preset, profile, objective or base
    settings under the same name is refused in one line naming both."""
    import optuna
    from filelock import FileLock

    optuna_study = optuna.create_study(study_name=study.name, storage=open_storage(study),
                                       sampler=sampler(study.seed, 0), pruner=pruner(study.prune),
                                       direction="maximize", load_if_exists=True)
    mine, found = study.identity(), optuna_study.user_attrs.get("identity")
    if found is None:
        study.lock_path().parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(study.lock_path())):  # two new commands at once: the first one's identity stays
            found = optuna_study.user_attrs.get("identity")
            if found is None:
                optuna_study.set_user_attr("identity", mine)
                found = mine
    if found != mine:
        raise TuneError(f"study {study.name} is a study of {_described(found)}; this command is of {_described(mine)}: "
                        "a study is one preset, profile, objective and base settings. Name another study (--study), "
                        "or none: the name then follows from what is searched")
    return optuna_study


def _described(identity: dict) -> str:
    settings = " ".join(identity["settings"]) or "no --set"
    return f"{identity['preset']} on {identity['profile']}, {identity['metric']}, {settings}"


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
        _beat_for_live_workers(study, optuna_study)  # the lock decides liveness, not the heartbeat
        optuna.storages.fail_stale_trials(optuna_study)  # a storage without heartbeats (the journal) has none
        trials = optuna_study.get_trials(deepcopy=False)  # read once: nothing else asks while the lock is held
        _stop_where_trials_fail(study, trials)
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


def _beat_for_live_workers(study: Study, optuna_study) -> None:
    """A heartbeat for each running trial whose worker holds its trial lock (alive, though stopped, suspended or slow),
    so that the heartbeat's check fails only trials no live worker of this store holds."""
    from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
    from optuna.trial import TrialState

    storage = optuna_study._storage  # Optuna 5.1: Study has no public accessor of its storage
    if not (isinstance(storage, BaseHeartbeat) and is_heartbeat_enabled(storage)):
        return
    for trial in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _held(study.trial_lock_path(trial.number)):
            storage.record_heartbeat(trial._trial_id)


def _held(path: Path) -> bool:
    """Whether a live process holds the trial lock at `path`."""
    from filelock import FileLock, Timeout

    if not path.is_file():
        return False
    probe = FileLock(str(path))  # not a holder lock: the file keeps saying who holds it
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    probe.release()
    return False


def _stop_where_trials_fail(study: Study, trials: list) -> None:
    """StudyStopped where the trials' own failures (not kills, not the machine's) reach the study's total."""
    failed = [t for t in trials if "error" in t.user_attrs]
    if len(failed) >= study.trials:
        raise StudyStopped(f"{len(failed)} trials of study {study.name} failed, as many as its total (the last: "
                           f"{failed[-1].user_attrs['error']}): the study stops. Mend what fails them (--debug shows "
                           "a trial's traceback), then start a new study (another --study, or --seed)")


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
        if trial.state != TrialState.RUNNING or not path.is_file():
            continue
        holder = describe_holder(lock_holder(path))
        queued = _run_again_if_free(study, optuna_study, trial)
        if queued is None:
            continue
        if queued:
            say(f"trial {trial.number} was left running by {holder}, which is gone: it is run again (its run reused "
                "from the store, or resumed from its checkpoint)")
        else:
            say(f"trial {trial.number} was left running by {holder}, which is gone, and its configuration's worker "
                f"has now died {RETRIES + 1} times: the configuration is given up and a new one is drawn in its "
                "place (docs/tuning.md, 'When things go wrong')")
        again += 1
    return again


def _run_again_if_free(study: Study, optuna_study, trial) -> bool | None:
    """Where no live worker holds running `trial` (its trial lock is free), mark it failed and enqueue its
    parameters again (queue_again, a death counted): whether it was queued (False: given up); None where a live
    worker holds it, or it was told meanwhile."""
    from filelock import FileLock, Timeout
    from optuna.trial import TrialState

    path = study.trial_lock_path(trial.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    probe = FileLock(str(path))  # not a holder lock: the file keeps saying who held it
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return None  # its worker is alive
    try:
        current = [t for t in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                   if t.number == trial.number]
        if not current:  # told between the caller's read and the lock
            return None
        optuna_study.tell(trial.number, state=TrialState.FAIL)
        return queue_again(optuna_study, current[0], died=True)
    finally:
        probe.release()


def _run_silent_trial_again(optuna_study, trial) -> None:
    """The heartbeat's callback for a trial it failed (silent past the grace period, no live worker of this store
    holding it): its configuration queued again, a death counted."""
    queue_again(optuna_study, trial, died=True)


def queue_again(optuna_study, trial, died: bool) -> bool:
    """Trial `trial`'s configuration queued to run next (a WAITING trial, as Optuna's
    RetryHeartbeatStaleTrialCallback adds, marked `failed_trial` so that it is no new draw), unless its worker has
    died (`died`: killed, silent) more than RETRIES times: then it is given up (False). A trial stopped by a signal
    or by the machine's fault is queued again without counting a death."""
    import optuna
    from optuna.trial import TrialState

    history = trial.system_attrs.get("retry_history", [])
    deaths = trial.system_attrs.get("deaths", 0) + died
    if deaths > RETRIES:
        return False
    optuna_study.add_trial(optuna.trial.create_trial(
        state=TrialState.WAITING, params=trial.params, distributions=trial.distributions,
        user_attrs={k: v for k, v in trial.user_attrs.items() if k != "error"},
        system_attrs={"failed_trial": history[0] if history else trial.number,
                      "retry_history": [*history, trial.number], "deaths": deaths}))
    return True


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

    try:
        params = {dim.name: dim.suggest(trial) for dim in study.space}
    except (ValueError, OverflowError) as error:  # Optuna's own refusal of a bound (OverflowError: a width too wide)
        raise SpaceRefused(f"{type(error).__name__}: {error}") from error
    cfg = study.config(params)
    key = store.key(cfg)
    with _saying_what_is_kept(store, key, trial.number):
        trial.set_user_attr("key", key)
        trial.set_user_attr("space", [asdict(d) for d in study.space])
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
    from .study_storage import StorageAway, StorageFull

    try:
        yield
    except StorageAway as away:
        when = "there is room again" if isinstance(away, StorageFull) else "the storage answers"
        raise type(away)(f"{away}; {what_is_kept(store, key, number, when)}") from None


def what_is_kept(store: ResultStore, key: str | None, number: int | None, when: str) -> str:
    """What became of trial `number`'s run (key; None: between trials), and how to go on once `when`."""
    from ..train.loop import CHECKPOINT

    if key is not None and store.record_path(key).is_file():
        return (f"trial {number}'s run is stored ({store.run_dir(key)}): run the same command again when {when}, "
                "and the trial takes its run from the store, nothing retrained")
    if key is not None and (store.run_dir(key) / CHECKPOINT).is_dir():
        return (f"trial {number}'s run keeps its last checkpoint ({store.run_dir(key)}): run the same command again "
                f"when {when}, and it resumes from there")
    if number is not None:
        return f"trial {number} had trained nothing yet: run the same command again when {when}"
    return f"no trial of this worker was running: run the same command again when {when}"


def _reporter(trial):
    """train()'s on_dev for a trial: each dev score reported at its step; whether the study's pruner stops it."""
    def on_dev(step: int, score: float) -> bool:
        trial.report(score, step)
        return trial.should_prune()

    return on_dev


def work(study: Study, say=_say) -> int:
    """One worker: trials until the study holds its total and no live worker runs one of them (it waits for those,
    so a study it ends is finished); the number it ran. `study.failures` of its trials failing in a row stop it."""
    optuna_study, store, ran, waited, in_a_row = load(study), study.store(), 0, None, 0
    while True:
        with _saying_what_is_kept(store, None, None):
            asked = next_trial(study, optuna_study, say)
            alive, unjudged = still_running(study, optuna_study) if asked is None else ([], [])
        if asked is not None:
            trial, lock = asked
            try:
                counted = run_and_tell(study, optuna_study, trial, store, say)
            finally:
                lock.release()
            ran, in_a_row = ran + counted, 0 if counted else in_a_row + 1
            if in_a_row >= study.failures:
                raise StudyStopped(f"{in_a_row} trials failed in a row (the last, trial {trial.number}: "
                                   f"{_error_of(optuna_study, trial.number)}): this worker stops, as the next would "
                                   f"likely fail too. Mend the cause (--debug shows a trial's traceback) and run the "
                                   f"same command again, or allow more (--failures-in-a-row, now {study.failures})")
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
    """Run one trial and tell the study its outcome; 1 where it counts toward the total (complete or pruned), 0 for
    a trial's own failure (recorded with its error, replaced by a new draw). A fault of the machine or the space
    stops the study (StudyStopped), and a signal stops it (KeyboardInterrupt), the trial's configuration queued to
    run first when the command runs again."""
    import optuna
    from optuna.storages._heartbeat import get_heartbeat_thread  # Optuna 5.1: what Study.optimize runs around a trial
    from optuna.trial import TrialState

    from .study_storage import DamagedStudyFile, StorageAway

    try:
        with get_heartbeat_thread(trial._trial_id, optuna_study._storage):
            value = run_trial(study, trial, store)
    except optuna.TrialPruned:  # counted in the total with the last dev score it reported
        _tell(study, optuna_study, trial, store, state=TrialState.PRUNED)
        return 1
    except (StorageAway, DamagedStudyFile):  # the storage's fault, not the trial's: nothing to tell it
        raise
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the study continues on rerun with this configuration
        _hand_back(optuna_study, trial)
        raise
    except Exception as error:
        fault = _fault(error)
        if fault is not None:
            raise StudyStopped(f"trial {trial.number} failed: {fault}; the study stops, as every trial would fail "
                               f"alike, and {_hand_back(optuna_study, trial)}; "
                               f"{what_is_kept(store, trial.user_attrs.get('key'), trial.number, 'it is mended')}"
                               ) from None
        trial_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        trial.set_user_attr("error", trial_error)
        _tell(study, optuna_study, trial, store, state=TrialState.FAIL)
        say(f"trial {trial.number} failed: {trial_error}")
        return 0
    _tell(study, optuna_study, trial, store, values=value)
    return 1


def _tell(study: Study, optuna_study, trial, store: ResultStore, **outcome) -> None:
    """Tell the trial's outcome; a trial failed behind this worker's back (it was stopped past the heartbeat's grace,
    and a worker that does not share this store judged it dead) ends the worker in one line."""
    from optuna.trial import TrialState

    with _saying_what_is_kept(store, trial.user_attrs.get("key"), trial.number):
        state = _state(optuna_study, trial.number)
        if state != TrialState.RUNNING:
            raise StudyStopped(f"trial {trial.number} was marked {state.name.lower()} by another worker while this "
                               f"one was silent past the heartbeat's grace ({study.heartbeat[1]} s): its "
                               "configuration was queued again there. "
                               f"{what_is_kept(store, trial.user_attrs.get('key'), trial.number, 'you like').capitalize()}")
        optuna_study.tell(trial, **outcome)


def _state(optuna_study, number: int):
    return next(t.state for t in optuna_study.get_trials(deepcopy=False) if t.number == number)


def _error_of(optuna_study, number: int) -> str:
    return next(t.user_attrs.get("error", "") for t in optuna_study.get_trials(deepcopy=False) if t.number == number)


def _fault(error: BaseException) -> str | None:
    """The machine's or the space's fault behind a trial's failure, in words (None: the trial's own failure)."""
    from ..data import DataError

    if isinstance(error, SpaceRefused):
        return f"Optuna cannot draw from the space ({error}): give bounds it can sample (--space)"
    if isinstance(error, DataError):  # a dataset missing or unverified: the same for every trial
        return f"{type(error).__name__}: {error}"
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in MACHINE_ERRNOS:
            return f"{MACHINE_ERRNOS[error.errno]} ({error})"
        error = error.__cause__ or error.__context__
    return None


def _hand_back(optuna_study, trial) -> str:
    """The trial failed and its configuration queued to run first (no death counted); what was done, in words. Where
    the storage cannot take it (full, away), the trial stays running and a rerun takes it up at once (its lock is
    released when this process ends)."""
    from optuna.trial import TrialState

    from .study_storage import StorageAway

    try:
        optuna_study.tell(trial, state=TrialState.FAIL)
        frozen = next(t for t in optuna_study.get_trials(deepcopy=False) if t.number == trial.number)
        queue_again(optuna_study, frozen, died=False)
        return f"trial {trial.number}'s configuration runs first when the same command runs again"
    except StorageAway:
        return (f"trial {trial.number} stays running in the storage (which cannot take more now); the same command "
                "run again takes its configuration up first")


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
    """`workers` local processes on the study, each in its own session: a signal to this command (Ctrl-C, SIGTERM)
    is passed to each as SIGTERM, and the command waits for them to hand their trials back before it stops."""
    spec = json.dumps({**asdict(study), "space": [asdict(d) for d in study.space]})
    procs = [subprocess.Popen([sys.executable, "-m", "cse_kit.experiments.tuning", spec], start_new_session=True)
             for _ in range(workers)]
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        _stop_workers(procs)
        raise
    stopped = [f"pid {p.pid} {_ended(code)}" for p, code in zip(procs, codes) if code]
    if stopped:
        say(f"{len(stopped)} of {workers} workers stopped early ({', '.join(stopped)}); rerun the same command to "
            "finish the study")


def _ended(code: int) -> str:
    """How a worker process ended: `exit N`, or `killed by SIGNAME` (Popen's negative return code)."""
    import signal

    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def _stop_workers(procs: list, grace: float = 60.0) -> None:
    """SIGTERM to each worker still running, then wait for each to hand its trial back (SIGKILL after `grace` s)."""
    import signal

    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


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
    """The chosen configuration trained (or read) over seeds and tested: the study's only test-set reads, of a
    configuration the study evaluated on dev (its trial's run is the study seed's run). With
    workers (local processes or SLURM jobs, as the report's: parallel.compute_all) the runs the store lacks are
    computed by them first, in the precision the study's jobs trained in (sent_to_jobs)."""
    from ..results import parallel

    winner, store = best(study), study.store()
    params = winner["params"]
    if winner["key"] != store.key(study.config(params)):  # the study's identity makes this a stale store's doing
        raise TuneError(f"study {study.name}'s chosen trial {winner['number']} was run {winner['key']}, but its "
                        f"settings now make run {store.key(study.config(params))}: the test would score a "
                        "configuration the study never evaluated on dev")
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


def _interrupted(signum, frame):
    import signal

    for s in (signal.SIGTERM, signal.SIGINT):  # one stop: handing the trial back is not interrupted again
        signal.signal(s, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":  # a worker process of run()
    import signal

    spec = json.loads(sys.argv[1])
    spec["heartbeat"] = tuple(spec["heartbeat"])
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupted)
    try:
        work(Study(**spec))
    except KeyboardInterrupt:  # its trial handed back; the command that started it says so
        sys.exit(128 + signal.SIGTERM)
    except ValueError as error:  # the storage away, full or damaged, a study stopped or refused: one line
        _say(f"cse-kit tune worker: {error}")
        sys.exit(2)
