"""The measured step times a report's bill is priced with (`cse-kit report --plan`, cse_kit.report.plan): per device
and profile, each method's seconds per optimizer step at a preset (DiffAug's stage 1 apart) and the sentences that
step encodes, one dev evaluation, one checkpoint, and where measured each final evaluation (an STS test, a transfer
test). Shipped figures (step_times.json beside this module: a lent H200 on the paper profile) come with the command,
device and date that measured them; `cse-kit report --profile P --plan --measure` times this machine's (measure) into
<results store>/step_times.json (USER_FILE), which the plan reads first.

How a run is priced from them (Figures.step_seconds): its method's figure (its large-backbone figure where it trains
BERT-large or RoBERTa-large, else the base one times `large_factor`, an estimate), scaled to the sentences its own
steps encode (the batch times its views: 2 for a corpus sentence, 3 for an NLI triplet or a sentence with its next;
plus the NLI batch of an auxiliary loss; times the gradient accumulation), affinely where the device has a fixed
cost per step (`overhead_sentences`, fitted on the GPU), in proportion on a CPU."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..data.registry import ORDERED_CORPORA, is_nli
from ..environment import variables_set

SHIPPED_FILE = Path(__file__).with_name("step_times.json")
#: this machine's measured figures, in the results store's folder (a lab's shared store keeps each device's apart)
USER_FILE = "step_times.json"
#: the backbones charged as large (cse_kit.train.presets.PRESETS' first field)
LARGE_BACKBONES = ("bert-large", "roberta-large")
#: the two quick training runs `--measure` times a method with: WARMUP steps, then WARMUP + STEPS (the difference
#: is STEPS steps without the first one's allocations)
WARMUP, STEPS = 1, 3
#: Accelerate's mixed_precision -> the words a figure is recorded with
PRECISION = {"no": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}


class NoStepTimes(ValueError):
    """No measured figure for what the plan needs, in one line naming the command that measures it."""


def device_name() -> str:
    """What this machine trains on: the GPU's name where CUDA is available, else the CPU's model, its cores and its
    bf16 unit (a CPU figure holds for the same CPU and core count only)."""
    import torch

    from ..environment import cpu_bf16_unit, cpu_model

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    unit = cpu_bf16_unit()
    return f"{cpu_model() or 'CPU'} ({os.cpu_count()} cores{', ' + unit if unit else ''})"


def user_file(results_dir) -> Path:
    from ..results import default_results_dir

    return (Path(results_dir) if results_dir else default_results_dir()) / USER_FILE


def _read(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as err:
        raise NoStepTimes(f"{path} is not readable step times ({err}): delete it and measure again with "
                          "`cse-kit report --plan --measure`") from None
    return found.get("devices", {}) if isinstance(found, dict) else {}


def recorded(results_dir) -> list[tuple[str, str, str, dict]]:
    """Every recorded figure: (device, profile, source, entry), this machine's measurements (USER_FILE) first."""
    out = []
    for path, source in ((user_file(results_dir), "measured"), (SHIPPED_FILE, "shipped")):
        for device, profiles in _read(path).items():
            out += [(device, profile, f"{source}: {path}", entry) for profile, entry in profiles.items()]
    return out


def measure_command(profile: str) -> str:
    return f"cse-kit report --profile {profile} --plan --measure"


def figures_for(profile: str, results_dir=None, device: str | None = None) -> "Figures":
    """The figures the plan of `profile` is priced with: `device`'s where named; else this machine's measured ones;
    else the shipped ones for the profile (the paper profile's: a lent H200); else any device's measured for it."""
    found = [f for f in recorded(results_dir) if f[1] == profile]
    if device:
        chosen = [f for f in found if f[0] == device]
        if not chosen:
            devices = sorted({f[0] for f in found})
            raise NoStepTimes(f"no step times of {device!r} for the {profile} profile (recorded for it: "
                              f"{', '.join(devices) or 'none'}); measure them on that machine with "
                              f"`{measure_command(profile)}`")
    else:
        here = device_name()
        chosen = ([f for f in found if f[0] == here] or [f for f in found if f[2].startswith("shipped")]
                  or found)
    if not chosen:
        raise NoStepTimes(f"no measured step times for the {profile} profile on this machine ({device_name()}): "
                          f"`{measure_command(profile)}` times a few steps of each method the report trains here "
                          "(minutes), then prices the plan")
    return Figures(*chosen[0])


@dataclass
class Figures:
    device: str
    profile: str
    source: str
    entry: dict

    def method(self, cfg) -> tuple[dict, float, str | None]:
        """(the method's figures, the factor they are charged at, why an estimate or None) for a run."""
        from ..train.presets import PRESETS

        methods = self.entry.get("methods", {})
        name, own = cfg.method, None
        if name not in methods and _own_method(name) and "simcse" in methods:
            # A researcher's method is usually SimCSE's step plus a little: the report's bill should not stop for
            # want of its figure, but say it is an estimate and how to time it.
            name, own = "simcse", (f"{cfg.method}, a method of your own, charged at SimCSE's step (not timed on "
                                   f"{self.device}: `{measure_command(self.profile)}` times it)")
        large = cfg.preset in PRESETS and PRESETS[cfg.preset][0] in LARGE_BACKBONES
        if large and f"{name}/large" in methods:
            return methods[f"{name}/large"], 1.0, own
        if name not in methods:
            raise NoStepTimes(
                f"no step time of method {name!r} on {self.device} for the {self.profile} profile (it has "
                f"{', '.join(methods) or 'none'}): `{measure_command(self.profile)}` times every method the plan "
                "needs on this machine" + ("; a method of your own is timed once its module is imported "
                                           "($CSE_KIT_PLUGINS)" if "/" not in name else ""))
        if large:
            factor = self.entry.get("large_factor")
            if factor is None:
                raise NoStepTimes(f"no step time of {name} on a large backbone on {self.device} for the "
                                  f"{self.profile} profile: `{measure_command(self.profile)}` times it")
            scaled = f"{PRESETS[cfg.preset][0]} at {factor:g} x the base figure"
            return methods[name], float(factor), "; ".join(w for w in (own, scaled) if w)
        return methods[name], 1.0, own

    def step_seconds(self, cfg, stage: int) -> tuple[float, str | None]:
        """Seconds of one optimizer step of `stage` (1: a two-stage run's first) of run cfg, and why it is an
        estimate (None where it is the figure itself or scaled by its sentences)."""
        figure, factor, why = self.method(cfg)
        ms, reference = figure["ms"], figure["sentences"]
        if stage == 1:
            if "stage1_ms" in figure:
                ms, reference = figure["stage1_ms"], figure["stage1_sentences"]
            else:  # a semi-supervised strategy's supervised stage: the method's own step at its sentences
                why = (why + "; " if why else "") + "a supervised first stage at the method's step time"
        overhead = float(self.entry.get("overhead_sentences", 0))
        size = sentences(cfg, stage)
        return ms / 1000 * factor * (overhead + size) / (overhead + reference), why

    def dev_eval_seconds(self, cfg) -> float:
        figure = self.entry.get("methods", {}).get(cfg.method, {})
        return float(figure.get("dev_eval_s", self.entry.get("dev_eval_s", 0.0)))

    def checkpoint_seconds(self) -> float:
        return float(self.entry.get("checkpoint_s", 0.0))

    def evaluation_seconds(self, kind: str) -> float | None:
        """Seconds of one final evaluation of `kind` (an STS test, a transfer test), or None where not measured. The
        store's `sts_dev` (STS-B and SICK-R dev of the best checkpoint) is the dev evaluation a run makes in
        training: charged at that figure where not measured apart."""
        value = self.entry.get("evaluations_s", {}).get(kind)
        if value is None and kind == "sts_dev" and "dev_eval_s" in self.entry:
            value = self.entry["dev_eval_s"]
        return None if value is None else float(value)

    def describe(self) -> str:
        e = self.entry
        words = [self.device]
        if e.get("measured"):
            words.append(f"measured {e['measured']}")
        if e.get("command"):
            words.append(f"by `{e['command']}`")
        if e.get("precision"):
            words.append(e["precision"])
        return f"{', '.join(words)} ({self.source})"


def sentences(cfg, stage: int = 2) -> int:
    """The sentences one optimizer step of cfg encodes: stage 1, its NLI batch's triplets; the main stage, its
    batch's views (2 of a corpus sentence, 3 of an NLI triplet or of a sentence with its next), plus the NLI
    triplets of an auxiliary loss, times the gradient accumulation."""
    if stage == 1:
        return cfg.nli_batch_size * 3
    views = 3 if is_nli(cfg.data) or cfg.data in ORDERED_CORPORA else 2
    aux = cfg.nli_batch_size * 3 if cfg.aux_weight else 0
    return (cfg.batch_size * views + aux) * cfg.gradient_accumulation


# --- measuring ------------------------------------------------------------------------------------------------------
def _quiet_train(cfg) -> dict:
    import warnings

    from ..train import train

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a stage 1 longer than its main stage, a checkpoint's notes: all expected
        return train(cfg, progress=False, announce=lambda line: None)


def _timing_run(cfg, root: Path, name: str, stage1: int, main: int) -> dict:
    """cfg trained for `stage1` first-stage and `main` main steps (evaluated once, at its end; one checkpoint, at
    its last step) in a folder of its own; its summary."""
    # enough epochs for `main` steps on a small sample (SCD's batch of 192 is 2 steps an epoch of the cpu profile's)
    overrides = {"output_dir": str(root / name), "max_steps": main, "epochs": main + 1, "eval_steps": 10 ** 9,
                 "eval_epoch_end": False, "save_steps": stage1 + main, "early_stopping_patience": 0,
                 "stage1_snapshot_steps": 0, "log_with": "none"}
    if cfg.stage1_steps or stage1:
        overrides["stage1_steps"] = stage1
    return _quiet_train(cfg.replace(**overrides))


def _standins(cfg, root: Path):
    """cfg with its mini-profile miniatures (backbone, generator) replaced by same-shaped random-weight stand-ins
    where they are not in the Hugging Face cache (the Hub is not needed to time them: cse_kit.models.standins)."""
    from ..models import in_hub_cache
    from ..models.miniatures import is_miniature
    from ..models.standins import write_standin

    changes = {}
    for field in ("model", "generator"):
        ref = getattr(cfg, field, None)
        if isinstance(ref, str) and is_miniature(ref) and not in_hub_cache(ref):
            folder = root / "standins" / ref.replace("/", "--")
            if not (folder / "config.json").is_file():
                write_standin(ref, folder)
            changes[field] = str(folder)
    return cfg.replace(**changes) if changes else cfg


def time_method(cfg, root: Path, two_stages: bool) -> dict:
    """One method's figures on this machine: its main step (and its first stage's) from two short runs apiece (the
    difference of WARMUP + STEPS and WARMUP steps), one dev evaluation and one checkpoint."""
    cfg = _standins(cfg, root)
    first = 1 if two_stages else 0
    base = _timing_run(cfg, root, "base", first, WARMUP)
    more = _timing_run(cfg, root, "main", first, WARMUP + STEPS)
    out = {"ms": _per_step(base, more), "sentences": sentences(cfg), "preset": cfg.preset,
           "dev_eval_s": more["seconds"]["eval"], "checkpoint_s": more["seconds"]["checkpoint"],
           "precision": PRECISION.get(more.get("mixed_precision"), more.get("mixed_precision"))}
    if two_stages:
        out["stage1_ms"] = _per_step(base, _timing_run(cfg, root, "stage1", first + STEPS, WARMUP))
        out["stage1_sentences"] = sentences(cfg, 1)
    return out


def _per_step(base: dict, more: dict) -> float:
    """Milliseconds a step: the training seconds `more` spent beyond `base`, over its steps beyond base's."""
    steps = more["steps"] - base["steps"]
    if steps < 1:
        raise RuntimeError(f"the timing runs trained {base['steps']} and {more['steps']} steps: nothing to time")
    return 1000 * max(0.0, more["seconds"]["train"] - base["seconds"]["train"]) / steps


def time_evaluation(kind: str, model: str, pooler: str, profile: str, data_dir, root: Path) -> float:
    """Seconds of one final evaluation of `kind` of the profile's untrained backbone (a trained run of the same
    shape costs the same), through a results store of its own, as the report computes it."""
    from ..results import Pretrained, ResultStore

    store = ResultStore(root / f"store-{kind}", data_dir, notify=lambda line: None)
    record = store.get(Pretrained(model, pooler, profile), (kind,))
    return float(record["timings"][f"eval_{kind}_s"])


@contextlib.contextmanager
def _no_progress_bars():
    """The timing runs' tokenizing and evaluation bars off (the measurement prints one line per figure)."""
    import datasets

    was_off = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        with variables_set({"TQDM_DISABLE": "1"}):
            yield
    finally:
        if not was_off:
            datasets.enable_progress_bars()


def measure(profile: str, representatives: dict, evaluations: list[str], data_dir=None, results_dir=None,
            log=print) -> Figures:
    """Time each method of `representatives` (figure key -> (a run of the plan, whether it has two stages)) and each
    final evaluation of `evaluations` on this machine, write them into USER_FILE under this machine's name and the
    profile, and return them. Nothing is kept but the figures (the runs train in a temporary folder)."""
    import tempfile

    import torch

    from ..environment import cpu_model
    from ..train.presets import PROFILES

    device = device_name()
    methods, spent = {}, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cse-kit-measure-") as tmp, _no_progress_bars():
        root = Path(tmp)
        for key, (cfg, two_stages) in representatives.items():
            log(f"timing {key} ({cfg.preset}, {sentences(cfg)} sentences a step) on {device}")
            methods[key] = time_method(cfg.replace(data_dir=str(data_dir) if data_dir else cfg.data_dir),
                                       root / key.replace("/", "-"), two_stages)
            log(f"  {methods[key]['ms']:.1f} ms a step" + (f", stage 1 {methods[key]['stage1_ms']:.1f} ms"
                                                           if "stage1_ms" in methods[key] else "")
                + f"; dev evaluation {methods[key]['dev_eval_s']:.2f} s")
        timed = {}
        backbone = PROFILES[profile].get("backbones", {}).get("bert", (None,))[0]
        if backbone and evaluations:
            model = _standins(next(iter(representatives.values()))[0].replace(model=backbone), root).model \
                if representatives else backbone
            for kind in evaluations:
                log(f"timing one {kind} evaluation of {backbone}")
                timed[kind] = time_evaluation(kind, model, "cls_before_pooler", profile, data_dir, root)
                log(f"  {timed[kind]:.1f} s")
    checkpoints = [m.pop("checkpoint_s") for m in methods.values()]
    entry = {"measured": time.strftime("%Y-%m-%d"), "command": measure_command(profile),
             "source": f"{device}; torch {torch.__version__}, {torch.get_num_threads()} threads"
                       + (f"; CPU {cpu_model()}" if not torch.cuda.is_available() else ""),
             "precision": ", ".join(sorted({str(m.pop('precision')) for m in methods.values()})),
             "methods": methods, "checkpoint_s": max(checkpoints, default=0.0),
             "overhead_sentences": 0,
             "overhead_note": "a step's time is taken in proportion to the sentences it encodes (a CPU has no fixed "
                              "launch cost to speak of)",
             "evaluations_s": timed, "measuring_s": round(time.perf_counter() - spent, 1)}
    if torch.cuda.is_available():
        entry["overhead_sentences"] = 620
        entry["overhead_note"] = ("affine in the sentences, the fixed part as fitted on an H200 (step_times.json): "
                                  "re-fit it on this GPU with bench/train_speed.py at two batch sizes")
    path = user_file(results_dir)
    from ..io import write_json_atomic

    found = _read(path)
    found.setdefault(device, {})[profile] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"about": "step times measured by `cse-kit report --plan --measure` on each device "
                                      "(cse_kit/report/step_times.py)", "devices": found})
    log(f"wrote {path}")
    return Figures(device, profile, f"measured: {path}", entry)


def _own_method(name: str) -> bool:
    """Whether `name` is a registered method of one's own (not one of the kit's)."""
    from ..methods.registry import METHODS, is_kit_method

    return name in METHODS and not is_kit_method(METHODS[name])
