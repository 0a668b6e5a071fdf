"""The language of `cse-kit tune --space` and `--prune`: the searched settings as Optuna dimensions, and Optuna's
pruner by name. Optuna is imported where it is used: `cse-kit --help` builds every command's parser without it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import TuneError

_RANGE = re.compile(r"^(log|int|intlog)?\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)$")

SPACE_SYNTAX = ("name=log(a,b) (log-uniform float), name=(a,b) (uniform float), name=int(a,b), name=intlog(a,b), "
                "name=[x,y,z] (choices); dimensions separated by ';'")

#: the pruners `--prune` names: Optuna's classes
PRUNERS = {"median": "MedianPruner", "percentile": "PercentilePruner", "hyperband": "HyperbandPruner",
           "successive-halving": "SuccessiveHalvingPruner", "threshold": "ThresholdPruner"}
_PRUNER = re.compile(r"^([a-z-]+)\s*(?:\((.*)\))?$")


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


def setting(name: str, value) -> str:
    return f"{name}={value!r}" if isinstance(value, float) else f"{name}={value}"


def draw_each(space: list) -> None:
    """A configuration drawn from the space by Optuna in memory: a bound it cannot sample is refused at the door."""
    import optuna

    quiet_optuna()
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(0)).ask()
    for dim in space:
        try:
            dim.suggest(trial)
        except (ValueError, OverflowError) as error:
            raise TuneError(f"space dimension {dim.name}: Optuna cannot draw from it ({error})") from None


def quiet_optuna() -> None:
    """Optuna's notes on its experimental heartbeat and on heartbeats outside Study.optimize: the kit asks and tells
    itself (next_trial, under a lock) and runs the heartbeat as optimize does (trials.work)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
