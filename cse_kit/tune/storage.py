"""A study's Optuna storage that outlives a fault of its database: created safely by K workers started at once,
patient with a dropped connection or a restarting server (each call retried with a doubling pause, up to `patience`
seconds, then one line naming the storage), a full disk said as a full disk (SQLite's file or PostgreSQL's data, not
waited out), and a damaged SQLite study file said as such, with the way on.

Optuna's RDBStorage is wrapped, not copied: every call of its storage protocol goes through `PatientStorage`, so the
study's own calls (ask, tell, user attributes, reports) and Optuna's (the heartbeat, stale trials) all wait alike."""

from __future__ import annotations

import contextlib
import random
import re
import time
from pathlib import Path

import optuna
from optuna.storages import BaseStorage
# Optuna 5.1: the heartbeat protocol RDBStorage implements has no public name (optuna.storages._heartbeat)
from optuna.storages._heartbeat import BaseHeartbeat

from .errors import error_chain

#: the pauses between tries of a call to a storage that stopped answering (then the last, until the patience is spent)
PAUSES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
#: how often creating a new storage's tables is tried when another process is creating them at the same moment
CREATION_TRIES = 8
#: SQLite's errors for a file that is no database, or one whose pages are damaged
DAMAGED = ("SQLITE_NOTADB", "SQLITE_CORRUPT")
#: a full disk: SQLite's error, PostgreSQL's SQLSTATE disk_full (class 53, insufficient resources)
FULL = ("SQLITE_FULL", "53100")


class StorageAway(ValueError):
    """The storage stopped answering and did not come back within the patience: one line, what was kept."""


class StorageFull(StorageAway):
    """The storage's disk is full (SQLite's file, PostgreSQL's data): not waited out, said as a full disk."""


class DamagedStudyFile(ValueError):
    """A SQLite study file that is not a database (truncated, overwritten): one line, how to go on."""


def with_driver(url: str) -> str:
    """A PostgreSQL URL without a driver named gets psycopg 3, the driver the kit's `tune` extra installs
    (SQLAlchemy's default for postgresql:// is psycopg2)."""
    return re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)


def safe(url: str) -> str:
    """A storage URL without its password."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def sqlite_file(url: str) -> Path | None:
    return Path(url.split(":///", 1)[1]) if url.startswith("sqlite:///") else None


def open_rdb(url: str, heartbeat: tuple, patience: float, creation_lock: Path, stale_trial):
    """Optuna's RDBStorage on `url` (heartbeats every heartbeat[0] s, a trial silent for heartbeat[1] s failed and
    handed to `stale_trial(study, trial)`), created under `creation_lock` (a file lock every worker sharing the
    results store takes) and tried again where another process created the same tables at the same moment (a worker
    elsewhere); wrapped in PatientStorage. A storage that cannot be reached (an unknown scheme, a missing database, a
    wrong password) fails before the lock is taken: nothing is created for it."""
    import sqlalchemy.exc

    from ..io import holder_lock

    interval, grace = heartbeat
    engine = {"pool_pre_ping": True}  # a connection the server dropped is replaced, not used
    if url.startswith("postgresql"):
        engine["connect_args"] = {"connect_timeout": 10}
    _probe(url, engine)
    creation_lock.parent.mkdir(parents=True, exist_ok=True)
    with holder_lock(str(creation_lock)):
        for attempt in range(CREATION_TRIES):
            try:
                inner = optuna.storages.RDBStorage(
                    url, engine_kwargs=engine, heartbeat_interval=interval, grace_period=grace,
                    heartbeat_stale_trial_callback=stale_trial)
                break
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
                # the tables (SQLite: alembic_version's row; PostgreSQL: a type of the same name) were being created
                # by another process: they exist a moment later
                if attempt == CREATION_TRIES - 1:
                    raise
                time.sleep(random.uniform(0.05, 0.25) * (attempt + 1))
            except Exception as error:
                if failure(error) == "damaged":
                    raise damaged(url, error) from None
                if failure(error) == "full":
                    raise full(url, error) from None
                raise
    return PatientStorage(inner, url, patience)


def _probe(url: str, engine: dict) -> None:
    """Connect once, outside the creation lock: a server's database or password refused, or a scheme SQLAlchemy does
    not know, raises here (SQLite creates its file on the first write, under the lock)."""
    import sqlalchemy

    if sqlite_file(url):
        return
    probe = sqlalchemy.create_engine(url, **engine)
    try:
        with probe.connect():
            pass
    finally:
        probe.dispose()


def failure(error: BaseException) -> str | None:
    """'damaged' (SQLite: the file is no database), 'full' (the disk under SQLite's file or PostgreSQL's data),
    'transient' (a connection dropped or refused, a server restarting, SQLite busy) or None (anything else: a bug or a
    bad value, not waited out), from the error's chain."""
    import sqlalchemy.exc

    for e in error_chain(error):
        said = {getattr(x, attr, None) for x in (e, getattr(e, "orig", None))
                for attr in ("sqlite_errorname", "sqlstate")}
        if said & set(DAMAGED):
            return "damaged"
        if said & set(FULL):
            return "full"
        if isinstance(e, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
                          sqlalchemy.exc.DisconnectionError)) or getattr(e, "connection_invalidated", False):
            return "transient"
    return None


def cause(error: BaseException) -> str:
    """The driver's words for a transient failure (psycopg's "connection refused", SQLite's "database is locked"),
    not Optuna's wrapper around them ("e.g. exceeding max length"): `Type: first line`."""
    import sqlalchemy.exc

    found = next((e.orig or e for e in error_chain(error) if isinstance(e, sqlalchemy.exc.DBAPIError)), error)
    words = str(found).strip().splitlines()
    return f"{type(found).__name__}: {words[0][:200] if words else ''}"


def damaged(url: str, error: BaseException) -> DamagedStudyFile:
    path = sqlite_file(url)
    words = str(getattr(error, "orig", None) or error).splitlines()[0][:200]
    return DamagedStudyFile(
        f"the study file {path} is damaged ({words}): move it aside (`mv {path} {path}.damaged`) and run the same "
        "command again; the results store keeps every trained run, and a study's configurations follow from its "
        "seed, so the same trials are drawn again and only those the store lacks train")


def full(url: str, error: BaseException) -> StorageFull:
    where = sqlite_file(url) or safe(url)
    return StorageFull(f"the disk holding the study's storage {where} is full ({cause(error)}): free space there and "
                       "run the same command again")


def _retried(name: str):
    """The storage method `name`, called on the wrapped storage through PatientStorage.call (waited out)."""
    def method(self, *args, **kwargs):
        return self.call(name, *args, **kwargs)

    method.__name__ = name
    return method


class PatientStorage(BaseStorage, BaseHeartbeat):
    """An RDBStorage whose every call waits out a storage that stopped answering: tried again after a doubling pause
    until `patience` seconds are spent, then StorageAway (StorageFull where its disk is full)."""

    def __init__(self, inner: optuna.storages.RDBStorage, url: str, patience: float):
        self.inner, self.url, self.patience = inner, url, patience

    def call(self, name: str, *args, **kwargs):
        deadline, pauses, tries = time.monotonic() + self.patience, iter(PAUSES), 0
        while True:
            try:
                return getattr(self.inner, name)(*args, **kwargs)
            except Exception as error:
                kind = failure(error)
                if kind == "damaged" and sqlite_file(self.url):
                    raise damaged(self.url, error) from None
                if kind == "full":
                    raise full(self.url, error) from None
                if kind != "transient":
                    if tries and name == "set_trial_state_values" and _already(self.inner, *args, **kwargs):
                        return True  # the first try was committed; only its answer was lost
                    raise
                pause = next(pauses, PAUSES[-1])
                if time.monotonic() + pause > deadline:
                    raise StorageAway(f"the study's storage {safe(self.url)} stopped answering ({cause(error)}) and "
                                      f"did not come back within {self.patience:g} s") from None
                tries += 1
                time.sleep(pause)

    # Optuna 5.1's storage protocol: BaseStorage's abstract methods, those RDBStorage implements again, and the
    # heartbeat's; BaseStorage's other methods call these
    create_new_study = _retried("create_new_study")
    delete_study = _retried("delete_study")
    set_study_user_attr = _retried("set_study_user_attr")
    set_study_system_attr = _retried("set_study_system_attr")
    get_study_id_from_name = _retried("get_study_id_from_name")
    get_study_name_from_id = _retried("get_study_name_from_id")
    get_study_directions = _retried("get_study_directions")
    get_study_user_attrs = _retried("get_study_user_attrs")
    get_study_system_attrs = _retried("get_study_system_attrs")
    get_all_studies = _retried("get_all_studies")
    create_new_trial = _retried("create_new_trial")
    set_trial_param = _retried("set_trial_param")
    get_trial_param = _retried("get_trial_param")
    get_trial_id_from_study_id_trial_number = _retried("get_trial_id_from_study_id_trial_number")
    set_trial_state_values = _retried("set_trial_state_values")
    set_trial_intermediate_value = _retried("set_trial_intermediate_value")
    set_trial_user_attr = _retried("set_trial_user_attr")
    set_trial_system_attr = _retried("set_trial_system_attr")
    get_trial_user_attrs = _retried("get_trial_user_attrs")
    get_trial_system_attrs = _retried("get_trial_system_attrs")
    get_trial = _retried("get_trial")
    get_all_trials = _retried("get_all_trials")
    get_best_trial = _retried("get_best_trial")
    _get_stale_trial_ids = _retried("_get_stale_trial_ids")  # BaseHeartbeat's own (private) name
    get_heartbeat_interval = _retried("get_heartbeat_interval")
    get_heartbeat_stale_trial_callback = _retried("get_heartbeat_stale_trial_callback")

    def remove_session(self) -> None:
        self.inner.remove_session()

    def record_heartbeat(self, trial_id: int) -> None:
        # from the heartbeat's thread: a beat missed while the storage is away is harmless (the grace period is four
        # of them), and the trial's own calls wait for the storage and say it
        with contextlib.suppress(Exception):
            self.inner.record_heartbeat(trial_id)


def _already(inner, trial_id: int, state, values=None) -> bool:
    """Whether trial_id already holds `state` (a retried tell whose first try was committed)."""
    try:
        return inner.get_trial(trial_id).state == state
    except Exception:
        return False
