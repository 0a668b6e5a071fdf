"""`cse-kit doctor` (issue 59): one line per check against the committed references, the likely cause of a number
that moved, exit 1 when one differs beyond its tolerance, --quick, --write-references (issue 68: the references' code
digest is the code's, hints carry the options given), a SLURM job; and the CPU classes (AVX2 only, AVX512-BF16, AMX) emulated with ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA and $CSE_KIT_CPU_UNIT."""

import json
import subprocess
import sys

import pytest

from conftest import cli_env
from cse_kit import cli, doctor
from cse_kit.environment import CPU_UNIT_ENV, capped_by_isa, chosen_unit, describe
from cse_kit.results import code_version

#: what a machine of each CPU class runs, emulated on whatever CPU runs the tests (docs/install.md, "CPU classes"):
#: the AVX2 class narrows what is real on any x86 CPU with AVX2; the AVX512-BF16 class narrows an AMX CPU and is
#: real here; the AMX class names a unit this CPU may lack ($CSE_KIT_CPU_UNIT as a test override)
CPU_CLASSES = {
    "AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "AVX512-BF16": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", CPU_UNIT_ENV: "AVX512-BF16"},
    "AMX-BF16": {CPU_UNIT_ENV: "AMX-BF16"},
}


def as_cpu_class(name: str) -> dict:
    return {**cli_env(), **CPU_CLASSES[name]}


def python(code: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def measured_as_references(references: dict, quick: bool, **environment) -> dict:
    """What measure() returns where every number is its reference's, in the references' environment (whatever CPU and
    thread count the suite runs on: its workers run one thread each) changed by `environment`, with the code the
    references were checked against."""
    values = {c.name: references["values"][c.name]["value"] for c in doctor.selected(quick) if doctor.runs_here(c)}
    here = describe()
    theirs = {k: v for k, v in references["provenances"][0].items() if k in here}
    return {"environment": {**here, **theirs, **environment}, "code": references["code"], "values": values,
            "seconds": 1.0}


def counts_line(quick: bool, differs: int = 0) -> str:
    """The summary's counts where `differs` checks differ and the rest of those this CPU runs are the same (a bf16
    check is skipped on a CPU with no bf16 unit)."""
    runs = [doctor.runs_here(c) for c in doctor.selected(quick)]
    counts = [f"{sum(runs) - differs} same", f"{differs} differs" if differs else "",
              f"{runs.count(False)} skipped" if not all(runs) else ""]
    return ", ".join(c for c in counts if c)


def line_of(lines, name: str) -> str:
    """The verdict line of check `name` (its status first)."""
    [line] = [line for line in lines if line.split(" ", 1)[-1].lstrip().startswith(name + " ")]
    return line


def doctor_cli(monkeypatch, capsys, measured: dict, *args) -> tuple[int, list[str]]:
    """`cse-kit doctor *args` with measure() answering `measured`: (exit code, its lines)."""
    monkeypatch.setattr(doctor, "measure", lambda quick, data_dir: measured)
    code = cli.main(["doctor", *args])
    return code, capsys.readouterr().out.splitlines()


def test_the_references_were_checked_against_the_number_deciding_code_of_this_commit():
    """The results store's code digest (what keys its records) is the references' own: else a clean checkout's doctor
    would name a code change as the likely cause of every number that moves."""
    references = doctor.read_references()["code"]
    assert references == code_version(), (
        f"the kit's number-deciding code (cse_kit.results.RESULT_CODE) has digest {code_version()}, the doctor's "
        f"references {references}: run `cse-kit doctor --write-references` (every check: not --quick, on a CPU with "
        "a bf16 unit), check it prints every check `same` (a number that moved is rewritten: intended?) and commit "
        "cse_kit/doctor_references.json with the code change")


def test_the_references_name_every_check_with_where_and_how_they_were_measured():
    references = doctor.read_references()
    assert set(references["values"]) == {c.name for c in doctor.checks()}
    assert len([c for c in doctor.checks() if c.name.startswith("main command: ")]) == 16
    for provenance in references["provenances"]:
        assert provenance["command"].startswith(doctor.WRITE_COMMAND) and provenance["date"]
        for key in ("cpu_model", "cpu_capability", "cpu_bf16", "torch_threads", "torch", "transformers", "platform"):
            assert key in provenance
    main = {name.removeprefix("main command: "): entry["value"] for name, entry in references["values"].items()
            if name.startswith("main command: ")}
    # the README's table of the main command, to its two decimals
    assert [round(main[t], 2) for t in ("STS12", "STSBenchmark", "STS avg", "CR", "transfer avg")] == \
        [72.37, 82.03, 78.87, 82.07, 82.52]


def test_the_same_numbers_pass_with_one_line_per_check(monkeypatch, capsys):
    references = doctor.read_references()
    code, lines = doctor_cli(monkeypatch, capsys, measured_as_references(references, quick=False))
    assert code == 0
    verdicts = [line for line in lines if line.split(" ")[0] in ("same", "DIFFERS", "skipped", "missing")]
    assert len(verdicts) == len(doctor.checks()) and all(v.startswith(("same ", "skipped ")) for v in verdicts)
    assert lines[-1].endswith("this machine and library stack reproduce the kit's reference numbers")


def test_another_library_version_that_moved_no_number_is_said_and_passes(monkeypatch, capsys):
    references = doctor.read_references()
    there = references["provenances"][0]["transformers"]
    measured = measured_as_references(references, quick=True, transformers="5.17.0", mteb=None)
    code, lines = doctor_cli(monkeypatch, capsys, measured, "--quick")
    assert code == 0
    assert lines[2] == f"against the references' environment: transformers 5.17.0 here, {there} in the references"
    assert lines[-1] == (f"{counts_line(quick=True)}: no number moved; this machine and library stack reproduce the "
                         "kit's reference numbers")


def test_a_library_outside_the_tested_range_is_one_line_naming_the_range_and_the_script(monkeypatch, capsys):
    """Said before the numbers are compared, one line per library, whether or not a number moved."""
    references = doctor.read_references()
    tested = json.loads(doctor.TESTED_VERSIONS.read_text())
    measured = measured_as_references(references, quick=True, transformers="99.0.0", torch="2.6.0+cpu")
    code, lines = doctor_cli(monkeypatch, capsys, measured, "--quick")
    assert code == 0
    low, high = tested["min"], tested["newest"]
    assert lines[2:4] == [
        f"torch 2.6.0+cpu is outside the versions the kit was tried on (torch {low['torch']} to {high['torch']}, "
        f"bench/versions.sh on {tested['date']}): `bench/versions.sh` tries the kit at both ends of its range, "
        "docs/install.md",
        f"transformers 99.0.0 is outside the versions the kit was tried on (transformers {low['transformers']} to "
        f"{high['transformers']}, bench/versions.sh on {tested['date']}): `bench/versions.sh` tries the kit at both "
        "ends of its range, docs/install.md"]
    assert lines[4].startswith("against the references' environment: torch 2.6.0+cpu here")


def test_quick_keeps_the_sts_numbers_cr_the_smoke_runs_and_the_steps(monkeypatch, capsys):
    references = doctor.read_references()
    code, lines = doctor_cli(monkeypatch, capsys, measured_as_references(references, quick=True), "--quick")
    assert code == 0 and "not its other transfer tasks" in lines[0]
    for kept in ("main command: CR", "main command: STS avg", "SimCSE smoke run: loss", "cpu-profile steps, fp32: loss"):
        assert line_of(lines, kept)
    assert not [line for line in lines if "main command: MR " in line or "transfer avg" in line]
    assert len(lines) == 3 + len(doctor.selected(quick=True)) + 1


def test_a_number_beyond_its_tolerance_exits_1_naming_it_its_difference_and_the_likely_cause(monkeypatch, capsys,
                                                                                              tmp_path):
    """A tampered references file: the check it moved differs (exit 1), the line says by how much and what differs
    from the references' environment, and the summary names the command that refreshes the references."""
    references = doctor.read_references()
    measured = measured_as_references(references, quick=True, transformers="5.0.0", torch_threads=64)
    tampered = json.loads(json.dumps(references))
    tampered["values"]["main command: STS12"]["value"] += 0.5
    tampered["values"]["DiffCSE smoke run: loss"]["value"][5] -= 0.01
    path = tmp_path / "references.json"
    path.write_text(json.dumps(tampered))
    code, lines = doctor_cli(monkeypatch, capsys, measured, "--quick", "--references", str(path))
    assert code == 1
    differs = [line for line in lines if line.startswith("DIFFERS")]
    assert differs == [line_of(lines, "main command: STS12"), line_of(lines, "DiffCSE smoke run: loss")]
    assert "Δ 0.5 > 0.01" in differs[0] and "Δ 0.01 at step 6 > 0.0001" in differs[1]
    provenance = references["provenances"][0]
    assert (f"likely cause: transformers 5.0.0 here, {provenance['transformers']} in the references; threads 64 here, "
            f"{provenance['torch_threads']} in the references") in differs[0]
    assert lines[-1].startswith(f"{counts_line(quick=True, differs=2)}. ")
    assert lines[-1].endswith(f"`{doctor.WRITE_COMMAND} --quick --references {path}`")


def test_the_step_check_takes_the_losses_the_loop_logs(data_dir, tmp_path):
    """The cpu-profile check steps its run without the loop (no dev evaluation at its end): its losses must be the
    ones the loop logs for the same run, here on the smoke profile."""
    settings, data = {"seed": 3, "max_steps": 3, "mixed_precision": "no"}, str(data_dir)
    _, logged = doctor._train(doctor.STEP_PRESET, "smoke", {**settings, "eval_steps": 3}, tmp_path / "loop", data)
    assert len(logged) == 3
    assert doctor._steps(doctor.STEP_PRESET, "smoke", settings, tmp_path / "steps", data) == logged


def test_the_likely_cause_names_the_cpu_the_bf16_unit_for_bf16_numbers_and_else_the_code():
    here = {**describe(), "cpu_capability": "AVX2", "cpu_bf16": None}
    there = {**describe(), "cpu_capability": "AVX512", "cpu_bf16": "AVX512-BF16"}
    fp32, bf16 = (c for c in doctor.checks() if c.name.startswith("cpu-profile steps"))
    assert doctor.likely_causes(here, there, fp32) == ["CPU kernels AVX2 here, AVX512 in the references"]
    assert doctor.likely_causes(here, there, bf16)[-1] == "bf16 unit None here, AVX512-BF16 in the references"
    assert doctor.code_changes({"code": "1"}, {"code": "1"}) == []
    assert doctor.code_changes({"code": "1"}, {"code": "0"}) == [
        "the kit's training and evaluation code changed since the references were checked (code digest 1 here, 0 in "
        "the references)"]


def test_a_code_change_is_a_likely_cause_only_where_the_code_changed(monkeypatch, capsys, tmp_path):
    """The STS12 that moved names the code only when its digest is not the references'; where nothing moved, the last
    line says how to record the new digest, with the references file given."""
    references = doctor.read_references()
    references["values"]["main command: STS12"]["value"] += 0.5
    path = tmp_path / "references.json"
    path.write_text(json.dumps(references))
    measured = measured_as_references(references, quick=True)
    measured["values"]["main command: STS12"] -= 0.5
    _, lines = doctor_cli(monkeypatch, capsys, measured, "--quick", "--references", str(path))
    assert "code" not in line_of(lines, "main command: STS12")
    _, lines = doctor_cli(monkeypatch, capsys, {**measured, "code": "0" * 16}, "--quick", "--references", str(path))
    assert line_of(lines, "main command: STS12").endswith(
        f"the kit's training and evaluation code changed since the references were checked (code digest "
        f"{'0' * 16} here, {references['code']} in the references)")
    references["values"]["main command: STS12"]["value"] -= 0.5
    path.write_text(json.dumps(references))
    code, lines = doctor_cli(monkeypatch, capsys, {**measured, "code": "0" * 16}, "--quick", "--references", str(path))
    assert code == 0 and lines[-2].endswith("this machine and library stack reproduce the kit's reference numbers")
    assert lines[-1] == (f"the kit's changed code moved none of these numbers: `{doctor.WRITE_COMMAND} --references "
                         f"{path}` (every check) records its digest in the references, changing no number")


def written_by(monkeypatch, capsys, references: dict, measured: dict, path, *args) -> tuple[dict, str]:
    """The references file `cse-kit doctor --write-references --references path *args` leaves from `references`, and
    its last line, where measure() answers `measured`."""
    path.write_text(json.dumps(references))
    code, lines = doctor_cli(monkeypatch, capsys, measured, "--write-references", "--references", str(path), *args)
    assert code == 0
    return doctor.read_references(path), lines[-1]


def test_write_references_after_every_check_same_records_the_code_and_changes_no_number(monkeypatch, capsys,
                                                                                         tmp_path):
    """Measured by the next code, every number within its tolerance (the last bits of another machine): the file
    keeps every number and provenance and takes the code's digest."""
    references = doctor.read_references()
    measured = {**measured_as_references(references, quick=False, cpu_capability="AVX2"), "code": "0" * 16}
    measured["values"]["main command: STS12"] += 0.001
    measured["values"]["cpu-profile steps, bf16: loss"] = references["values"]["cpu-profile steps, bf16: loss"]["value"]
    written, line = written_by(monkeypatch, capsys, references, measured, tmp_path / "references.json")
    assert written == {**references, "code": "0" * 16}
    assert line == (f"wrote 0 reference values to {tmp_path / 'references.json'} (the {len(doctor.checks())} found the "
                    f"same keep theirs), checked against the code of digest {'0' * 16}; commit it with the change")


def test_write_references_replaces_what_moved_and_keeps_what_it_did_not_measure(monkeypatch, capsys, tmp_path):
    """--quick on a CPU without a bf16 unit: the number that moved is replaced under this environment's provenance;
    the one found the same, the transfer tasks and the bf16 loss keep theirs, and so does the code digest (those were
    not checked against this code), said with the command that checks them all."""
    references = doctor.read_references()
    path = tmp_path / "references.json"
    measured = {**measured_as_references(references, quick=True, cpu_bf16=None, cpu_capability="AVX2"),
                "code": "0" * 16}
    measured["values"] = {k: v for k, v in measured["values"].items() if "bf16" not in k}
    measured["values"]["main command: STS12"] += 0.5
    measured["values"]["main command: STS13"] += 0.001
    written, line = written_by(monkeypatch, capsys, references, measured, path, "--quick")
    assert written["values"]["main command: STS12"]["value"] == measured["values"]["main command: STS12"]
    new = written["provenances"][written["values"]["main command: STS12"]["provenance"]]
    assert new["cpu_capability"] == "AVX2" and new["command"] == f"{doctor.WRITE_COMMAND} --quick"
    for kept in ("main command: STS13", "main command: MR", "cpu-profile steps, bf16: loss"):
        assert written["values"][kept]["value"] == references["values"][kept]["value"]
        assert written["provenances"][written["values"][kept]["provenance"]] == \
            references["provenances"][references["values"][kept]["provenance"]]
    assert written["code"] == references["code"]
    assert line.startswith(f"wrote 1 reference value to {path} (the {len(measured['values']) - 1} found the same keep "
                           f"theirs), its code digest stays {references['code']}: 8 of its values were not measured "
                           "here (e.g. main command: MR); ")
    assert f"`{doctor.WRITE_COMMAND} --references {path}` on a CPU with a bf16 unit checks them all" in line


def test_write_references_to_a_new_file_writes_what_it_measured(monkeypatch, capsys, tmp_path):
    """A lab's own references, written the first time with --quick: every value measured, so the code's digest."""
    measured = measured_as_references(doctor.read_references(), quick=True)
    path = tmp_path / "lab.json"
    code, lines = doctor_cli(monkeypatch, capsys, measured, "--quick", "--write-references", "--references", str(path))
    written = doctor.read_references(path)
    assert code == 0 and written["code"] == measured["code"]
    assert {name: entry["value"] for name, entry in written["values"].items()} == measured["values"]


def test_every_hint_carries_the_options_given(monkeypatch, capsys, tmp_path):
    """Following a hint as printed rewrites the file that was compared, with the same checks, data and cluster."""
    references = doctor.read_references()
    measured = measured_as_references(references, quick=True)
    del references["values"]["main command: STS12"]
    path = tmp_path / "lab references.json"
    path.write_text(json.dumps(references))
    code, lines = doctor_cli(monkeypatch, capsys, measured, "--quick", "--data-dir", "my data", "--references",
                             str(path))
    hint = f"`{doctor.WRITE_COMMAND} --quick --data-dir 'my data' --references '{path}'`"
    assert code == 1 and line_of(lines, "main command: STS12").endswith(hint) and lines[-1].endswith(hint)
    assert doctor.write_command(cluster="slurm", references_path=doctor.REFERENCES) == \
        f"{doctor.WRITE_COMMAND} --cluster slurm"


def test_a_broken_references_file_is_one_line_naming_the_fix(tmp_path, capsys):
    path = tmp_path / "references.json"
    for broken in ("{not json", json.dumps({"values": {}, "provenances": []})):  # the second: no code digest
        path.write_text(broken)
        assert cli.main(["doctor", "--quick", "--references", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "git checkout" in err
        assert err.endswith(f"write it anew with `{doctor.WRITE_COMMAND} --quick --references {path}`")


# ---- the CPU classes, emulated ----

def test_the_unit_override_and_onednn_s_limit():
    assert [chosen_unit(v) for v in ("AMX-BF16", "avx512-bf16", "none")] == ["AMX-BF16", "AVX512-BF16", None]
    with pytest.raises(ValueError, match="set it to one of AMX-BF16, AVX512-BF16 or none"):
        chosen_unit("avx2")
    assert capped_by_isa("AMX-BF16", "AVX512_CORE_BF16") == "AVX512-BF16"
    assert capped_by_isa("AMX-BF16", "avx2") is None and capped_by_isa("AVX512-BF16", "AVX512_CORE") is None
    assert capped_by_isa("AVX512-BF16", "AVX512_CORE_AMX") == "AVX512-BF16"  # a limit never adds a unit
    assert capped_by_isa(None, None) is None and capped_by_isa("AMX-BF16", "") == "AMX-BF16"


SEE_THE_MACHINE = """
import json
from cse_kit import doctor
from cse_kit.environment import describe
from cse_kit.results import ResultStore
from cse_kit.train import build_config
from cse_kit.train.precision import resolve_precision

store = ResultStore("{tmp}/results", data_dir="{tmp}/data", cuda=False)
keys = {{p: store.key(build_config("simcse-bert", "cpu", {{"mixed_precision": p}})) for p in ("auto", "no", "bf16")}}
references = doctor.read_references()
values = {{c.name: references["values"][c.name]["value"] for c in doctor.selected(True) if doctor.runs_here(c)}}
values["main command: STS12"] += 1.0
measured = {{"environment": describe(), "code": references["code"], "values": values}}
lines = doctor.verdicts(measured, references, True, doctor.WRITE_COMMAND)
print(json.dumps({{"auto": resolve_precision("auto", cuda=False), "environment": describe("cpu"), "keys": keys,
                  "lines": lines}}))
"""


@pytest.mark.parametrize("cpu_class", CPU_CLASSES)
def test_auto_the_keys_and_the_doctor_as_each_cpu_class_sees_them(cpu_class, tmp_path):
    """auto trains in fp32 on the AVX2 class (keyed as fp32) and in bf16 on the others (keyed as bf16, the same key
    on both units); the records name the class; the doctor skips the bf16 check on the AVX2 class and names the
    CPU's kernels or unit where they differ from the references'."""
    seen = json.loads(python(SEE_THE_MACHINE.format(tmp=tmp_path), as_cpu_class(cpu_class)))
    env, keys = seen["environment"], seen["keys"]
    unit = None if cpu_class == "AVX2" else cpu_class
    assert env["cpu_bf16"] == unit and seen["auto"] == ("bf16" if unit else "no")
    assert keys["auto"] == keys["bf16" if unit else "no"] != keys["no" if unit else "bf16"]
    assert env["cpu_capability"] == ("AVX2" if cpu_class == "AVX2" else describe()["cpu_capability"])
    if cpu_class == "AMX-BF16" and "amx_bf16" not in open("/proc/cpuinfo").read():
        assert env["cpu_bf16_detected"] != "AMX-BF16"  # the records say the class is emulated
    lines = [f"{status} {line}" for status, line in seen["lines"]]
    assert line_of(lines, "cpu-profile steps, bf16: loss").startswith("skipped" if cpu_class == "AVX2" else "same")
    line = line_of(lines, "main command: STS12")
    assert line.startswith("DIFFERS")
    reference_cpu = doctor.read_references()["provenances"][0]
    if env["cpu_capability"] != reference_cpu["cpu_capability"]:
        assert f"CPU kernels {env['cpu_capability']} here, {reference_cpu['cpu_capability']}" in line


# ---- the real thing (minutes) ----

@pytest.mark.slow
@pytest.mark.parametrize("cpu_class", [None, "AVX2"])
def test_the_quick_doctor_passes_here_and_on_the_avx2_class(cpu_class, data_dir):
    """The fp32 tolerances hold across SIMD widths: this CPU, and its AVX2 kernels only."""
    env = as_cpu_class(cpu_class) if cpu_class else cli_env()
    done = subprocess.run(["cse-kit", "doctor", "--quick", "--data-dir", str(data_dir)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reproduce the kit's reference numbers" in done.stdout


@pytest.mark.slow
def test_the_doctor_runs_as_a_slurm_job(slurm, data_dir, tmp_path):
    """`cse-kit doctor --quick --cluster slurm`: the measuring is a SLURM job's (its log is named), the verdict the
    same; a reference tampered with is found there too."""
    references = doctor.read_references()
    references["values"]["SCD smoke run: best dev"]["value"] += 1.0
    path = tmp_path / "references.json"
    path.write_text(json.dumps(references))
    done = subprocess.run(["cse-kit", "doctor", "--quick", "--cluster", "slurm", "--data-dir", str(data_dir),
                           "--references", str(path)], env=cli_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SLURM job" in done.stdout and "submitted" in done.stdout
    [differs] = [line for line in done.stdout.splitlines() if line.startswith("DIFFERS")]
    assert "SCD smoke run: best dev" in differs
