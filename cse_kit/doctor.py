"""`cse-kit doctor`: does this machine and this library stack reproduce the kit's reference numbers?

It measures what the kit computes and compares each number with the references committed beside this module
(doctor_references.json), each written with where it was measured (the CPU, its kernels and bf16 unit, the threads,
the library versions, the date and the command). The checks:

- the README's main command, `cse-kit eval --model all-MiniLM-L6-v2 --pooler avg --tasks all --mode fasttest`: its 16
  numbers (`--quick`: the 7 STS ones, their average and CR, the smallest transfer task; the other transfer tasks
  encode 100k sentences, minutes on a laptop's CPU);
- each method's smoke run (its paper's BERT preset, as the head-to-head trains it) at a fixed seed in fp32: the best
  STS-B dev score and the loss at every step;
- two steps of a cpu-profile run (SimCSE on all-MiniLM-L6-v2): the loss of each, in fp32 and, where the CPU has a
  bf16 unit (AMX-BF16, AVX512-BF16), in bf16.

A number is "same" within its tolerance (TOLERANCES): fp32 sums in another order on other SIMD widths (AVX512 adds 16
floats at once, AVX2 8), thread counts and matrix sizes (oneDNN and MKL split a product by them), so the same run's
numbers differ in their last bits from one CPU to the next and these differences grow through the steps of a training
run; the tolerances are the differences measured between this kit's CPU kernels (ATEN_CPU_CAPABILITY=avx2 against
avx512, one thread against two: docs/install.md has the numbers) with a margin, far below what a library version or a
bug moves. A number beyond its tolerance is said with its likely cause: what differs between this environment and the
references' (a library version, the CPU's kernels or bf16 unit, the thread count, the kit's code).

The references hold the digest of the kit's number-deciding code they were checked against (the results store's
code_version: what keys its records), so a change to that code is named as a likely cause only where it happened;
tests/test_doctor.py fails while the code's digest and the references' differ, until `--write-references` (every check)
records it, changing no number that is still the same."""

from __future__ import annotations

import json
import math
import shlex
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from .environment import HUB_KERNELS_ENV, NUMBER_LIBRARIES, describe

REFERENCES = Path(__file__).with_name("doctor_references.json")
#: the versions the kit was tried on, its lowest (constraints-min.txt) and its newest, by bench/versions.sh
TESTED_VERSIONS = Path(__file__).with_name("tested_versions.json")
WRITE_COMMAND = "cse-kit doctor --write-references"
MAIN_MODEL, MAIN_POOLER, MAIN_MODE, MAIN_SEED = "all-MiniLM-L6-v2", "avg", "fasttest", 1111
#: the transfer task --quick keeps: the smallest (3,775 sentences), so one transfer classifier is still checked
QUICK_TRANSFER = "CR"
SMOKE_SEED = 1
STEP_PRESET, STEP_SEED, STEP_COUNT = "simcse-bert", 42, 2

#: the largest |measured - reference| that is the same, by kind of number (see the module's docstring)
TOLERANCES = {"sts": 0.01, "transfer": 0.1, "smoke dev": 0.05, "smoke loss": 1e-4, "step fp32": 1e-5,
              "step bf16": 0.01}


@dataclass(frozen=True)
class Check:
    name: str  # what its line says
    kind: str  # its TOLERANCES key
    quick: bool  # kept by --quick
    bf16: bool = False  # needs a bf16 unit

    @property
    def tolerance(self) -> float:
        return TOLERANCES[self.kind]


def checks() -> list[Check]:
    """Every check, in the order they are measured and printed."""
    from .data import STS_TASKS, TRANSFER_TASKS
    from .papers.comparison import METHODS

    main = [Check(f"main command: {t}", "sts", True) for t in (*STS_TASKS, "STS avg")]
    main += [Check(f"main command: {t}", "transfer", t == QUICK_TRANSFER) for t in (*TRANSFER_TASKS, "transfer avg")]
    smoke = [Check(f"{m} smoke run: {what}", f"smoke {what.split()[-1]}", True)
             for m in METHODS for what in ("best dev", "loss")]
    steps = [Check(f"cpu-profile steps, {p}: loss", f"step {p}", True, p == "bf16") for p in ("fp32", "bf16")]
    return main + smoke + steps


# ---- measuring (here, or in a SLURM job on the nodes that will train) ----

def measure(quick: bool, data_dir: str | None = None) -> dict:
    """{"environment": where it ran, "code": the digest of the number-deciding code it ran, "values": {check name:
    number or list}, "seconds": s}, for the checks of selected(quick) that run here."""
    import datasets

    from .results import code_version

    datasets.disable_progress_bars()  # a corpus's tokenizing bar: the doctor prints one line per check
    start = time.perf_counter()
    names = [c.name for c in selected(quick) if runs_here(c)]
    values = _main_command([n.removeprefix("main command: ") for n in names if n.startswith("main command: ")],
                           data_dir)
    with tempfile.TemporaryDirectory(prefix="cse-kit-doctor-") as tmp:
        for method in dict.fromkeys(n.split(" smoke run")[0] for n in names if " smoke run: " in n):
            best, losses = _smoke_run(method, Path(tmp), data_dir)
            values.update({f"{method} smoke run: best dev": best, f"{method} smoke run: loss": losses})
        for precision in ("fp32", "bf16"):
            if f"cpu-profile steps, {precision}: loss" in names:
                values[f"cpu-profile steps, {precision}: loss"] = _cpu_steps(precision, Path(tmp), data_dir)
    return {"environment": describe(), "code": code_version(), "values": values,
            "seconds": time.perf_counter() - start}


def selected(quick: bool) -> list[Check]:
    return [c for c in checks() if c.quick or not quick]


def runs_here(check: Check) -> bool:
    """Whether this machine runs the check: a bf16 one needs a bf16 unit (else `auto` trains in fp32 here)."""
    from .environment import cpu_bf16_unit

    return not check.bf16 or cpu_bf16_unit() is not None


def _main_command(names: list[str], data_dir) -> dict:
    """The main command's numbers among names ("STS12", ..., "STS avg", "MR", ..., "transfer avg")."""
    from .data import STS_TASKS, TRANSFER_TASKS
    from .eval import Encoder, evaluate
    from .eval.sts import headline
    from .models import load_model

    tasks = [t for t in (*STS_TASKS, *TRANSFER_TASKS) if t in names]
    tokenizer, model = load_model(MAIN_MODEL, data_dir=data_dir)
    encoder = Encoder(model, tokenizer, MAIN_POOLER, progress=False)
    result = evaluate(encoder, tasks, MAIN_MODE, data_dir, MAIN_SEED, model_name=MAIN_MODEL)
    values = {t: headline(t, result["sts"][t]) for t in tasks if t in STS_TASKS}
    values |= {t: result["transfer"][t]["acc"] for t in tasks if t in TRANSFER_TASKS}
    if "STS avg" in names:
        values["STS avg"] = result["sts"]["avg"]
    if "transfer avg" in names:
        values["transfer avg"] = result["transfer"]["avg"]
    return {f"main command: {name}": values[name] for name in names}


def _quiet_config(preset: str, profile: str, settings: dict, out: Path, data_dir):
    """The configuration of a doctor's run of preset on profile: every step's loss logged, no tracker, into out."""
    from .train import build_config

    return build_config(preset, profile, {**settings, "log_steps": 1, "log_with": "none", "data_dir": data_dir,
                                          "output_dir": str(out)})


def _train(preset: str, profile: str, settings: dict, out: Path, data_dir) -> tuple[float, list[float]]:
    """(best dev score, the loss of every step) of a quiet run of preset on profile."""
    from .train import train

    summary = train(_quiet_config(preset, profile, settings, out, data_dir), progress=False,
                    announce=lambda line: None)
    with open(out / "log.jsonl") as log:
        losses = [row["loss"] for row in map(json.loads, log) if "loss" in row]
    return summary["best"], losses


def _smoke_run(method: str, tmp: Path, data_dir) -> tuple[float, list[float]]:
    from .papers.comparison import METHODS

    return _train(METHODS[method][0], "smoke", {"seed": SMOKE_SEED, "mixed_precision": "no"}, tmp / method, data_dir)


def _cpu_steps(precision: str, tmp: Path, data_dir) -> list[float]:
    settings = {"seed": STEP_SEED, "max_steps": STEP_COUNT, "mixed_precision": "no" if precision == "fp32" else "bf16"}
    return _steps(STEP_PRESET, "cpu", settings, tmp / f"cpu-{precision}", data_dir)


def _steps(preset: str, profile: str, settings: dict, out: Path, data_dir) -> list[float]:
    """The loss of each step of a run of preset on profile (settings' max_steps of them), as the loop logs it: taken
    by the loop's own step (train.step.TrainStep) on the run the loop sets up (train.setup.set_up_run), without the
    dev evaluation the loop ends a run with, which this check does not read (most of a cpu-profile check's time; the
    smoke runs check the loop's)."""
    from .train.setup import set_up_run
    from .train.step import TrainStep

    cfg = _quiet_config(preset, profile, settings, out, data_dir)
    run = set_up_run(cfg)
    step = TrainStep(cfg, run.accelerator, run.objective, run.unwrapped, run.params, run.optimizers, run.schedulers,
                     run.batches, run.nli_batches, run.first_stage)
    run.objective.train()
    losses = []
    for taken in range(cfg.max_steps):
        step.step(taken)
        losses.append(step.readings()["loss"])
    return losses


# ---- comparing ----

def write_command(quick: bool = False, data_dir: str | None = None, cluster: str = "local",
                  references_path: Path = REFERENCES) -> str:
    """`cse-kit doctor --write-references` with the options given, the references file above all: without it, the
    command would rewrite the kit's file instead of a lab's own."""
    options = [WRITE_COMMAND] + ["--quick"] * quick + [f"--cluster {cluster}"] * (cluster != "local")
    if data_dir is not None:
        options.append(f"--data-dir {shlex.quote(str(data_dir))}")
    if Path(references_path).resolve() != REFERENCES.resolve():
        options.append(f"--references {shlex.quote(str(references_path))}")
    return " ".join(options)


def read_references(path: Path = REFERENCES, write: str = WRITE_COMMAND) -> dict:
    """{"code": the digest of the number-deciding code every value was last checked against, "provenances":
    [environment + date + command, ...], "values": {name: {"value": v, "provenance": i}}}. write: the command that
    writes the file anew, said where it cannot be read."""
    try:
        references = json.loads(Path(path).read_text())
        if not {"code", "values", "provenances"} <= set(references):
            raise ValueError("it has no code, values and provenances")
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"cannot read the doctor's references {path} ({error}): restore it (`git checkout -- "
                         f"{shlex.quote(str(path))}`) or write it anew with `{write}`") from None
    return references


def difference(measured, reference) -> tuple[float, int | None]:
    """(the largest |measured - reference|, the 1-based step where it is for a curve, else None); inf where the
    two do not have the same shape or a value is not finite."""
    curve = isinstance(reference, list)
    ours, theirs = (measured, reference) if curve else ([measured], [reference])
    if isinstance(measured, list) != curve or len(ours) != len(theirs):
        return math.inf, None
    gaps = [abs(m - r) if math.isfinite(m - r) else math.inf for m, r in zip(ours, theirs)] or [0.0]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps[worst], worst + 1 if curve else None


def is_same(check: Check, value, reference) -> bool:
    return difference(value, reference)[0] <= check.tolerance


def likely_causes(here: dict, there: dict, check: Check) -> list[str]:
    """What differs between this environment and a reference's, the likeliest first: library versions, the device,
    the CPU (kernels, its bf16 unit for a bf16 check, model), the thread count."""
    def named(key, what):
        return [f"{what} {here.get(key)} here, {there.get(key)} in the references"] \
            if here.get(key) != there.get(key) else []

    # a library one side lacks decides none of the doctor's numbers (mteb: `--benchmark mteb` only)
    causes = [cause for name in NUMBER_LIBRARIES if here.get(name) and there.get(name) for cause in named(name, name)]

    def kernels(env):  # references written before the setting existed were computed with them off
        return "on" if env.get("hub_kernels") else "off"

    if kernels(here) != kernels(there):
        causes.append(f"Hub kernels {kernels(here)} here (${HUB_KERNELS_ENV}), {kernels(there)} in the references")
    causes += named("device", "device") + named("gpu", "GPU") + named("cpu_capability", "CPU kernels")
    if check.bf16:
        causes += named("cpu_bf16", "bf16 unit")
    return causes + named("cpu_model", "CPU") + named("torch_threads", "threads")


def code_changes(measured: dict, references: dict) -> list[str]:
    """The kit's number-deciding code as a likely cause, where it is not the code the references were checked
    against (the least likely: most changes to it move no number)."""
    here, there = measured["code"], references["code"]
    return [] if here == there else [f"the kit's training and evaluation code changed since the references were "
                                     f"checked (code digest {here} here, {there} in the references)"]


def environment_differences(measured: dict, references: dict) -> list[str]:
    """What differs between this environment and any of the references' (likely_causes of a bf16 check: all of it),
    then the code."""
    bf16 = next(c for c in checks() if c.bf16)
    causes = [cause for there in references["provenances"] for cause in likely_causes(measured["environment"], there,
                                                                                      bf16)]
    return list(dict.fromkeys(causes + code_changes(measured, references)))


def verdicts(measured: dict, references: dict, quick: bool, write: str) -> list[tuple[str, str]]:
    """(status, line) per check of selected(quick): status same, DIFFERS, skipped or missing. write: the command
    that writes a missing reference."""
    return [verdict(check, measured, references, write) for check in selected(quick)]


def verdict(check: Check, measured: dict, references: dict, write: str) -> tuple[str, str]:
    label = f"{check.name:<40}"
    if check.name not in measured["values"]:
        return "skipped", f"{label} this CPU has no bf16 unit (`auto` trains in fp32 here)"
    entry = references["values"].get(check.name)
    if entry is None:
        return "missing", f"{label} no reference (a check added since they were written): `{write}`"
    value = measured["values"][check.name]
    gap, step = difference(value, entry["value"])
    shown = f"{_shown(value, entry['value'])}, Δ {gap:.2g}{f' at step {step}' if step and gap else ''}"
    if gap <= check.tolerance:
        return "same", f"{label} {shown} ≤ {check.tolerance:g}"
    causes = likely_causes(measured["environment"], references["provenances"][entry["provenance"]], check)
    causes += code_changes(measured, references)
    return "DIFFERS", f"{label} {shown} > {check.tolerance:g}; likely cause: " + "; ".join(causes or [
        "nothing in the environment differs from the references': a nondeterministic kernel, or other data"])


def _shown(value, reference) -> str:
    if isinstance(value, list):
        return f"{len(value)} steps, last {value[-1]:.4f} (reference {reference[-1]:.4f})" if value else "no steps"
    return f"{value:.4f} (reference {reference:.4f})"


def describe_environment(env: dict) -> str:
    """One line: the device or CPU, its kernels, bf16 unit and threads; the versions."""
    where = env.get("gpu") or f"{env.get('cpu_model')}, {env.get('cpu_capability')} kernels, " \
                              f"bf16 unit {env.get('cpu_bf16') or 'none'}"
    versions = ", ".join(f"{name} {env[name]}" for name in NUMBER_LIBRARIES if env.get(name))
    threads = env.get("torch_threads")
    return f"{where}, {threads} thread{'' if threads == 1 else 's'}; {versions}"


# ---- writing references ----

def moved(measured: dict, references: dict | None) -> set[str]:
    """The measured checks whose number has no reference or differs from it beyond its tolerance."""
    old = {} if references is None else references["values"]
    return {c.name for c in checks() if c.name in measured["values"]
            and (c.name not in old or not is_same(c, measured["values"][c.name], old[c.name]["value"]))}


def updated_references(measured: dict, references: dict | None, command: str) -> dict:
    """The references with every moved() value replaced, under a provenance of this environment, date and command.
    A value found the same keeps its number and provenance (rewriting it would move the references by this machine's
    last bits), and so does one not measured here (bf16 on a CPU without a bf16 unit, the transfer tasks under
    --quick). The code digest becomes the measured code's where every value was measured here (checked against it),
    else stays."""
    replaced = moved(measured, references)
    new = {**measured["environment"], "date": date.today().isoformat(), "command": command}
    provenances, values = [], {}
    for check in checks():
        if check.name in replaced:
            value, provenance = measured["values"][check.name], new
        elif references is not None and check.name in references["values"]:
            entry = references["values"][check.name]
            value, provenance = entry["value"], references["provenances"][entry["provenance"]]
        else:
            continue
        if provenance not in provenances:
            provenances.append(provenance)
        values[check.name] = {"value": value, "provenance": provenances.index(provenance)}
    checked = all(name in measured["values"] for name in values)
    return {"code": measured["code"] if checked else references["code"], "provenances": provenances,
            "values": values}


def write_references(path: Path, measured: dict, references: dict | None, command: str, whole: str, say) -> int:
    """Write updated_references() to path and say what moved, what was kept and which code the file was checked
    against. whole: the command that measures every check (the one that can record the code's digest)."""
    from .io import write_json_atomic

    written = updated_references(measured, references, command)
    write_json_atomic(path, written)
    replaced = len(moved(measured, references))
    unchecked = [name for name in written["values"] if name not in measured["values"]]
    code = f"checked against the code of digest {written['code']}" if not unchecked else (
        f"its code digest stays {written['code']}: {len(unchecked)} of its values were not measured here (e.g. "
        f"{unchecked[0]}); `{whole}` on a CPU with a bf16 unit checks them all")
    say(f"wrote {replaced} reference value{'' if replaced == 1 else 's'} to {path} (the "
        f"{len(measured['values']) - replaced} found the same keep theirs), {code}; commit it with the change")
    if path == REFERENCES and references is not None and not (replaced or unchecked) \
            and references["code"] != written["code"]:
        _carry_stores(references["code"], written["code"], len(written["values"]), say)
    return 0


def _carry_stores(old: str, new: str, checks: int, say) -> None:
    """Every check the same from code `old` to code `new`: results stores carry old's records to new's keys instead
    of computing them again (cse_kit.results.upgrade)."""
    from .results.upgrade import LINEAGE_FILE, add_lineage

    add_lineage(old, new, f"cse-kit doctor --write-references on {date.today().isoformat()}: all {checks} checks the "
                          f"same under code {new} as under {old}")
    say(f"code {new} gives the numbers of code {old} (every check the same): results stores carry {old}'s records to "
        f"it, retraining nothing ({LINEAGE_FILE.name}; commit it with the change)")


# ---- the command ----

def run(quick: bool = False, data_dir: str | None = None, cluster: str = "local", write: bool = False,
        references_path: Path = REFERENCES, say=print) -> int:
    """`cse-kit doctor`: measure here or in a SLURM job, then one line per check (exit 1 when a number differs beyond
    its tolerance or has no reference); with write, the references rewritten where a number moved or had none."""
    path = Path(references_path)
    rewrite, whole = write_command(quick, data_dir, cluster, path), write_command(False, data_dir, cluster, path)
    references = read_references(path, rewrite) if path.is_file() or not write else None
    kept = "" if not quick else \
        f" (--quick: the main command's STS numbers and {QUICK_TRANSFER}, not its other transfer tasks)"
    say(f"cse-kit doctor: {len(selected(quick))} checks{kept} against {path}"
        + (", measured in a SLURM job" if cluster == "slurm" else ""))
    measured = measure_on_slurm(quick, data_dir, say) if cluster == "slurm" else measure(quick, data_dir)
    say(f"measured on {describe_environment(measured['environment'])}, in {measured['seconds']:.0f} s")
    for line in outside_tested_range(measured["environment"]):
        say(line)
    lines = [] if references is None else compare(measured, references, quick, rewrite, say)
    if write:
        return write_references(path, measured, references, write_command(quick, cluster=cluster), whole, say)
    counts = {status: sum(1 for s, _ in lines if s == status) for status in ("same", "DIFFERS", "missing", "skipped")}
    failed = counts["DIFFERS"] + counts["missing"]
    say(", ".join(f"{n} {status.lower()}" for status, n in counts.items() if n) +
        (f". After an intended change (a library upgrade, a fix that moves numbers): `{rewrite}`" if failed else
         (": no number moved; " if environment_differences(measured, references) else ": ") +
         "this machine and library stack reproduce the kit's reference numbers"))
    if not failed and code_changes(measured, references):
        say(f"the kit's changed code moved none of these numbers: `{whole}` (every check) records its digest in the "
            "references, changing no number")
    return 1 if failed else 0


def outside_tested_range(env: dict, tested_path: Path = TESTED_VERSIONS) -> list[str]:
    """One line per library of env outside the versions the kit was tried on, naming that range and the script that
    tries a stack: a number it moves is then no bug of the kit's to look for first."""
    from packaging.version import Version

    tested = json.loads(tested_path.read_text())
    lines = []
    for name, lowest in tested["min"].items():
        newest = tested["newest"][name]
        if env.get(name) and not Version(lowest).release <= Version(env[name]).release <= Version(newest).release:
            lines.append(f"{name} {env[name]} is outside the versions the kit was tried on ({name} {lowest} to "
                         f"{newest}, {tested['script']} on {tested['date']}): `{tested['script']}` tries the kit at "
                         "both ends of its range, docs/install.md")
    return lines


def compare(measured: dict, references: dict, quick: bool, write: str, say) -> list[tuple[str, str]]:
    """Say what differs from the references' environment and one line per check; the verdicts()."""
    differences = environment_differences(measured, references)
    say("against the references' environment: " + ("; ".join(differences) if differences else
                                                    "the same versions, CPU, kernels, bf16 unit and threads"))
    lines = verdicts(measured, references, quick, write)
    for status, line in lines:
        say(f"{status:<8} {line}")
    return lines


def measure_on_slurm(quick: bool, data_dir: str | None, say) -> dict:
    """measure() as one SLURM job (submitit, $CSE_KIT_EXECUTOR_PARAMS: the partition of the nodes that will train),
    asking for what a cpu-profile run's job asks for. The data directory must be on a file system the nodes share."""
    from .data import resolve_data_dir
    from .results.parallel import executors, job_resources, jobs_dir, wait_quietly
    from .train import build_config

    folder = jobs_dir(Path.home() / ".cache" / "cse-kit" / "doctor")
    [executor] = executors(folder, 1, "slurm", job_resources([(build_config(STEP_PRESET, "cpu"), ())]))
    job = executor.submit(measure, quick, str(resolve_data_dir(data_dir).absolute()))
    say(f"SLURM job {job.job_id} submitted; its log: {job.paths.stdout}")
    if not wait_quietly([job]):
        raise JobFailed(f"the doctor's SLURM job {job.job_id} left the queue without a result (cancelled, or killed "
                        f"by its node): see {job.paths.stderr}")
    try:
        return job.result()
    except Exception as error:  # its traceback is in the job's log
        raise JobFailed(f"the doctor's SLURM job {job.job_id} failed ({type(error).__name__}: "
                        f"{str(error).strip().splitlines()[-1][:300]}): see {job.paths.stderr}") from None


class JobFailed(RuntimeError):
    """The doctor's SLURM job ended without its measurements."""
