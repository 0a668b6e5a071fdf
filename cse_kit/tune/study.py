"""A study: what it searches (preset, profile, base settings, space, seed, metric) and where it is kept, checked at
the door, its Optuna study loaded with its identity, and what it found (its trials, the chosen one, its test)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from ..results import ResultStore, default_results_dir, parallel
from ..train.config import METRICS
from ..train.presets import build_config
from .errors import TuneError
from .retry import run_silent_trial_again
from .space import Dimension, draw_each, pruner, quiet_optuna, setting

#: the storage of a study when none is given: beside the results store
DEFAULT_STORAGE = "studies.sqlite3"

#: seconds between a running trial's heartbeats, and after which a silent one is taken for dead
HEARTBEAT = (30, 120)

#: seconds a study's bookkeeping waits for its storage to answer again (a dropped connection, a restarting server)
#: before the command stops in one line (--storage-patience)
PATIENCE = 60.0


#: what `metric` may not be: a test set (a study selects on dev data only)
TEST_WORDS = ("test",)

#: a trial's own failures (a diverged run, a bug) in a row after which a worker stops (--failures-in-a-row)
FAILURES_IN_A_ROW = 3

#: a study's name: a file name's letters, no path parts (it names the study's lock files)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

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
        settings = [*self.overrides, *(setting(k, v) for k, v in params.items()), f"seed={seed}"]
        return build_config(self.preset, self.profile, settings)

    def store(self, notify=None) -> ResultStore:
        return ResultStore(self.results_dir, self.data_dir, notify=notify or (lambda line: None))

    def root(self) -> Path:
        """The results store's folder, as ResultStore resolves it (without opening the store: asked every trial)."""
        return Path(self.results_dir) if self.results_dir else default_results_dir()

    def storage_url(self) -> str:
        if self.storage:
            from .storage import with_driver

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


def check(study: Study):
    """Everything that would stop a trial, refused in one line before any runs: a setting the method does not have,
    a bound the setting does not accept or Optuna cannot draw from, a test set as the objective, a storage that does
    not answer; the storage, opened (the one a command passes down: load(study, storage))."""
    base = study.config({})
    if any(word in base.metric for word in TEST_WORDS) or base.metric not in METRICS:
        raise TuneError(f"a study selects on dev data only: metric {base.metric!r} is not one of {', '.join(METRICS)}")
    for dim in study.space:
        for value in dim.ends():
            try:
                study.config({dim.name: value})
            except (TypeError, ValueError) as error:
                raise TuneError(f"space dimension {dim.name}: {value!r} is refused by the run ({error})") from None
    draw_each(study.space)
    pruner(study.prune)
    return open_storage(study)


def open_storage(study: Study):
    """Optuna's storage of the study: RDB (SQLite, PostgreSQL...) with a heartbeat that re-runs a dead worker's trial,
    patient with a storage that stops answering (tune.storage), or a journal file; one line naming the URL where it
    does not answer, and one saying so where a SQLite study file is damaged or its disk full."""
    from . import storage  # Optuna's, imported where a storage opens

    quiet_optuna()
    url = study.storage_url()
    try:
        if url.startswith("journal:"):
            import optuna
            from optuna.storages.journal import JournalFileBackend

            return optuna.storages.JournalStorage(JournalFileBackend(url.partition(":")[2]))
        # workers sharing the results store create a new storage one at a time (SQLite's and PostgreSQL's table
        # creation race otherwise); a worker elsewhere is tried again
        return storage.open_rdb(url, study.heartbeat, study.patience,
                               study.root() / "locks" / "study-storage.lock", run_silent_trial_again)
    except (storage.DamagedStudyFile, storage.StorageFull):
        raise
    except Exception as error:  # sqlalchemy's and the driver's errors: a storage that cannot be reached or read
        words = str(error).splitlines()[0][:300]
        raise TuneError(f"the study's storage {storage.safe(url)} does not answer ({type(error).__name__}: "
                        f"{words}); check the URL, that the database runs and that its driver is installed "
                        "(PostgreSQL: pip install 'psycopg[binary]')") from None


def load(study: Study, opened=None):
    """The Optuna study on its storage (`opened`, as check() gives it; opened here where None), created where new,
    its identity stored with it; another preset, profile, objective or base settings under the same name is refused
    in one line naming both."""
    import optuna

    optuna_study = optuna.create_study(study_name=study.name, storage=opened or open_storage(study),
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


def summary(study: Study, optuna_study=None) -> list[dict]:
    """Every trial of the study (`optuna_study`, as load() gives it; loaded here where None): number, state, dev score,
    parameters, its run's key."""
    optuna_study = optuna_study or load(study)
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
                   cluster: str = "local", trials: list[dict] | None = None) -> list[dict]:
    """The chosen configuration trained (or read) over seeds and tested: the study's only test-set reads, of a
    configuration the study evaluated on dev (its trial's run is the study seed's run). With
    workers (local processes or SLURM jobs, as the report's: parallel.compute_all) the runs the store lacks are
    computed by them first, in the precision the study's jobs trained in (workers.sent_to_jobs). `trials`: the
    study's, as summary() gives them (read here where None)."""
    winner, store = best(study, trials), study.store()
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
        params = " ".join(setting(k, v) for k, v in t["params"].items())
        lines.append(f"{t['number']:>5}  {t['state']:<8} {value:>8}  {params}")
    return "\n".join(lines)


def study_lines(study: Study, trials: list[dict], storage_given: bool) -> list[str]:
    """The study as a terminal shows it after a command: what it is of, where, its trials and the chosen one."""
    where = "storage given" if storage_given else study.storage_url()
    lines = [f"study {study.name} of {study.preset} on {study.profile} ({where}): {len(trials)} trials",
             trial_table(trials)]
    if winner := chosen(trials):
        lines.append(f"chosen: trial {winner['number']}, dev {winner['value']:.4f}: "
                     + " ".join(f"{k}={v}" for k, v in winner["params"].items()))
    return lines


def tested_line(records: list[dict], seeds: list[int]) -> str:
    """The chosen configuration's STS test average over `seeds` (chosen_on_test's records): mean ± std (ddof 1), one
    seed's score without a spread."""
    scores = [record["metrics"]["sts_test"]["avg"] for record in records]
    if len(scores) == 1:
        return f"test (STS avg, 1 seed {seeds}): {scores[0]:.2f}"
    mean, std = statistics.mean(scores), statistics.stdev(scores)
    return f"test (STS avg, {len(scores)} seeds {seeds}): {mean:.2f} ± {std:.2f}"
