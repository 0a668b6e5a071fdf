"""The ways a study stops: refused at the door (TuneError), unable to succeed as it is (StudyStopped), a space Optuna
cannot draw from (SpaceRefused). Each is one line that names the fix."""


class TuneError(ValueError):
    """A study that cannot start, in one line that names the fix."""


class StudyStopped(ValueError):
    """A study that cannot succeed as it is (the machine, the space, a run that keeps failing): one line, what was
    kept and how to go on."""


class SpaceRefused(ValueError):
    """Optuna cannot draw a configuration from the space (a bound it cannot sample)."""


def error_chain(error: BaseException):
    """error and every exception it was raised from or while handling, once each (Optuna re-raises the driver's
    error, and its rollback on a dead connection raises another; a store's WriteFailed wraps the OSError)."""
    seen, chain = set(), [error]
    while chain:
        e = chain.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        chain += [e.__cause__, e.__context__]
