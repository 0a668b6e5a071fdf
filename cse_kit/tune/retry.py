"""A trial's configuration queued to run again after its worker died or was stopped: the kit's own retry (Optuna's
RetryHeartbeatStaleTrialCallback's, with deaths counted and a signal or a machine fault not counted)."""

from __future__ import annotations

#: a configuration whose worker dies (killed, silent past the heartbeat) this many times is given up
RETRIES = 3


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


def run_silent_trial_again(optuna_study, trial) -> None:
    """The heartbeat's callback for a trial it failed (silent past the grace period, no live worker of this store
    holding it): its configuration queued again, a death counted."""
    queue_again(optuna_study, trial, died=True)


