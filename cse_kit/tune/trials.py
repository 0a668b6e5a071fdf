"""A study's trials as a worker runs them: each asked for under the study's lock and held by a trial lock (the kernel
releases it when the worker dies, so the next to ask runs a dead worker's trial again at once), its run trained in
the results store, its outcome told; a failure sorted into the trial's own (recorded, the study goes on, K in a row
stop the worker) and the machine's or the space's (the study stops at once, the configuration queued first); what a
stopped trial kept, said. The lock decides liveness: a held trial is never failed by the heartbeat."""

from __future__ import annotations

import contextlib
import errno
import sys
import time
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock, Timeout

from ..data import DataError
from ..io import describe_holder, holder_lock, lock_holder
from ..results import ResultStore
from ..train.checkpoint import CHECKPOINT
from ..train.loop import TrainingPruned
from .errors import SpaceRefused, StudyStopped, error_chain
from .retry import RETRIES, queue_again
from .study import Study, load, sampler

#: seconds between looks at the trials a worker waits for (running in another worker, alive)
WAIT_POLL = 2.0

#: errors of the machine, not of a configuration: every trial would fail alike (a full disk or quota, a file too
#: large, a read-only or forbidden store)
MACHINE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is spent",
                  errno.EFBIG: "the file size limit is reached", errno.EROFS: "the store is read-only",
                  errno.EACCES: "the store may not be written", errno.EPERM: "the store may not be written"}


def next_trial(study: Study, optuna_study, say=None):
    """(a trial to run, its trial lock held), or None when the study holds its total: asked under the study's lock,
    after the trials of dead workers are failed and their parameters enqueued again (orphaned: their trial lock is
    free; or silent past the heartbeat's grace), so two workers never overshoot the total."""
    import optuna
    from optuna.trial import TrialState

    path = study.lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        _beat_for_live_workers(study, optuna_study)  # the lock decides liveness, not the heartbeat
        optuna.storages.fail_stale_trials(optuna_study)  # a storage without heartbeats (the journal) has none
        trials = optuna_study.get_trials(deepcopy=False)  # read once: nothing else asks while the lock is held
        _stop_where_trials_fail(study, trials)
        if run_orphans_again(study, optuna_study, trials, say or say_line):
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
    # Optuna 5.1: the heartbeat protocol and its check have no public names
    from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
    from optuna.trial import TrialState

    storage = optuna_study._storage  # Optuna 5.1: Study has no public accessor of its storage
    if not (isinstance(storage, BaseHeartbeat) and is_heartbeat_enabled(storage)):
        return
    for trial in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _held(study.trial_lock_path(trial.number)):
            storage.record_heartbeat(trial._trial_id)  # Optuna 5.1: a trial's storage id is private


def _held(path: Path) -> bool:
    """Whether a live process holds the trial lock at `path`."""
    if not path.is_file():
        return False
    with _taken_if_free(path) as free:
        return not free


@contextlib.contextmanager
def _taken_if_free(path: Path):
    """Whether the trial lock at `path` was free (no live worker holds it), held by this process for the block where
    it was. Not a holder lock: the file keeps saying who held it last."""
    probe = FileLock(str(path))
    try:
        probe.acquire(timeout=0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        probe.release()


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


def say_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_orphans_again(study: Study, optuna_study, trials: list, say) -> int:
    """Fail each running trial whose worker is gone (its trial lock is free: the kernel released it when the worker
    died, on this host or another sharing the store) and enqueue its parameters again, whatever the heartbeat: the
    trial's run is reused from the store, or resumed from its checkpoint. How many. A running trial without a trial
    lock in this store (a worker that does not share it) is the heartbeat's to judge."""
    from optuna.trial import TrialState

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
    from optuna.trial import TrialState

    path = study.trial_lock_path(trial.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _taken_if_free(path) as free:
        if not free:
            return None  # its worker is alive
        current = _frozen(optuna_study, trial.number)
        if current.state != TrialState.RUNNING:  # told between the caller's read and the lock
            return None
        optuna_study.tell(trial.number, state=TrialState.FAIL)
        return queue_again(optuna_study, current, died=True)


def still_running(study: Study, optuna_study) -> tuple[list[str], list[str]]:
    """The study's running trials after the orphans are failed, as `trial N (pid P on host H since ...)`: (those whose
    worker holds their trial lock, alive; those without a trial lock in this store, for the heartbeat to judge)."""
    from optuna.trial import TrialState

    alive, unjudged = [], []
    for t in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        path = study.trial_lock_path(t.number)
        (alive if path.is_file() else unjudged).append(f"trial {t.number} ({describe_holder(lock_holder(path))})")
    return alive, unjudged


def fail_running(study: Study, optuna_study=None) -> int:
    """Mark the study's running trials failed and enqueue their parameters again, but those a live worker holds (its
    trial lock); how many. For a killed worker's trial that no trial lock judges (an older kit's) where the storage
    has no heartbeat (the journal file): only while none of the study's workers runs."""
    from optuna.trial import TrialState

    optuna_study = optuna_study or load(study)
    return sum(_run_again_if_free(study, optuna_study, trial) is not None
               for trial in optuna_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def run_trial(study: Study, trial, store: ResultStore) -> float:
    """Train the trial's run in the store (a run it has is read, not trained) and return its dev score. Where the
    study prunes, each dev evaluation of the run is reported to the trial, and a run the pruner stops raises
    optuna.TrialPruned (its run keeps the checkpoint of that step; the store has no record of it)."""
    import optuna

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
    from .storage import StorageAway, StorageFull

    try:
        yield
    except StorageAway as away:
        when = "there is room again" if isinstance(away, StorageFull) else "the storage answers"
        raise type(away)(f"{away}; {what_is_kept(store, key, number, when)}") from None


def what_is_kept(store: ResultStore, key: str | None, number: int | None, when: str) -> str:
    """What became of trial `number`'s run (key; None: between trials), and how to go on once `when`."""
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


def work(study: Study, say=say_line, optuna_study=None) -> int:
    """One worker: trials until the study holds its total and no live worker runs one of them (it waits for those,
    so a study it ends is finished); the number it ran. `study.failures` of its trials failing in a row stop it.
    `optuna_study`: the study as the command loaded it (loaded here where None)."""
    optuna_study, store, ran, waited, in_a_row = optuna_study or load(study), study.store(), 0, None, 0
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
                last = _frozen(optuna_study, trial.number).user_attrs.get("error", "")
                raise StudyStopped(f"{in_a_row} trials failed in a row (the last, trial {trial.number}: "
                                   f"{last}): this worker stops, as the next would "
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

    from .storage import DamagedStudyFile, StorageAway

    try:
        # Optuna 5.1: a trial's storage id and a study's storage are private
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
        state = _frozen(optuna_study, trial.number).state
        if state != TrialState.RUNNING:
            kept = what_is_kept(store, trial.user_attrs.get("key"), trial.number, "you like")
            raise StudyStopped(f"trial {trial.number} was marked {state.name.lower()} by another worker while this "
                               f"one was silent past the heartbeat's grace ({study.heartbeat[1]} s): its "
                               f"configuration was queued again there; {kept}")
        optuna_study.tell(trial, **outcome)


def _frozen(optuna_study, number: int):
    """Trial `number` as the storage holds it now (its state, its attributes)."""
    return next(t for t in optuna_study.get_trials(deepcopy=False) if t.number == number)


def _fault(error: BaseException) -> str | None:
    """The machine's or the space's fault behind a trial's failure, in words (None: the trial's own failure)."""
    if isinstance(error, SpaceRefused):
        return f"Optuna cannot draw from the space ({error}): give bounds it can sample (--space)"
    if isinstance(error, DataError):  # a dataset missing or unverified: the same for every trial
        return f"{type(error).__name__}: {error}"
    return next((f"{MACHINE_ERRNOS[e.errno]} ({e})" for e in error_chain(error)
                 if isinstance(e, OSError) and e.errno in MACHINE_ERRNOS), None)


def _hand_back(optuna_study, trial) -> str:
    """The trial failed and its configuration queued to run first (no death counted); what was done, in words. Where
    the storage cannot take it (full, away), the trial stays running and a rerun takes it up at once (its lock is
    released when this process ends)."""
    from optuna.trial import TrialState

    from .storage import StorageAway

    try:
        optuna_study.tell(trial, state=TrialState.FAIL)
        queue_again(optuna_study, _frozen(optuna_study, trial.number), died=False)
        return f"trial {trial.number}'s configuration runs first when the same command runs again"
    except StorageAway:
        return (f"trial {trial.number} stays running in the storage (which cannot take more now); the same command "
                "run again takes its configuration up first")


