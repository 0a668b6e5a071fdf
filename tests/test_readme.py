"""The README's quick start, as a newcomer runs it: short, and its commands run as written."""

import os
import re
import subprocess

import pytest

from conftest import REPO, SHARED

QUICK_START_LINES = 60


def quick_start() -> str:
    """The README's quick start section, from its heading to the next one."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]


def blocks(section: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", section, re.S)


def block_with(command: str) -> str:
    """The quick start's code block that holds `command`, as written."""
    [block] = [b for b in blocks(quick_start()) if command in b]
    return block


def test_the_quick_start_fits_in_60_lines_and_every_command_says_how_long_it_takes():
    section = quick_start()
    assert len(section.strip().splitlines()) + 1 <= QUICK_START_LINES  # with its heading
    prose = re.sub(r"```bash\n.*?```", "", section, flags=re.S)
    assert len(blocks(section)) == 5 and len(re.findall(r"\d+ (?:s|min|minutes|CPU-seconds)\b", prose)) >= 6


def test_the_first_screen_holds_every_command_a_newcomer_runs():
    """`head -60 README.md`: the two set-up commands, the data step, the main command, the design card's command,
    the report and JupyterLab (`jupyter lab` was once pushed to line 63 by the --amp paragraph)."""
    first = "\n".join((REPO / "README.md").read_text(encoding="utf-8").splitlines()[:60])
    for command in ("python3 -m venv .venv", "python -m pytest", "cse-kit data import",
                    "cse-kit eval --model all-MiniLM-L6-v2", "papermill notebooks/table8_lambda.ipynb",
                    "cse-kit report --profile smoke", "jupyter lab notebooks/"):
        assert command in first, command


def setup_commands(block: str) -> list[str]:
    """The commands of the set-up block, without their `# 1. install` comments."""
    return [line.split("   # ")[0].rstrip() for line in block.strip().splitlines()]


def test_ci_and_the_install_guide_run_the_readmes_two_set_up_commands_in_a_virtual_environment():
    readme = setup_commands(block_with("# 1. install"))
    assert len(readme) == 2 and readme[0].startswith("python3 -m venv .venv && . .venv/bin/activate && ")
    assert readme[1] == "python -m pytest"
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert readme[0] in ci and ci[-1] == readme[1]  # set-up first, the tests last
    [guide] = [b for b in blocks((REPO / "docs" / "install.md").read_text()) if "# 1. install" in b]
    assert setup_commands(guide) == readme
    assert "/.venv/" in (REPO / ".gitignore").read_text().splitlines()


def test_the_readme_data_step_leaves_the_smoke_and_cpu_profiles_green(tmp_path):
    """The data step as written, into a fresh data folder, offline: `data status` of both profiles the kit runs
    without a GPU exits 0 (it once stopped at "missing or not verified ...: Licenses-ordered")."""
    step = block_with("cse-kit data import")
    if SHARED != REPO.parent / "shared":  # the README names the archives beside the clone
        step = step.replace("../shared/", f"{SHARED}/")
    env = {**os.environ, "CSE_KIT_DATA": str(tmp_path / "data"), "CSE_KIT_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    (tmp_path / "data").mkdir()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", step], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    cpu = subprocess.run(["cse-kit", "data", "status", "--profile", "cpu"], cwd=REPO, env=env, capture_output=True,
                         text=True)
    assert cpu.returncode == 0, cpu.stdout + cpu.stderr


def numbers(text: str) -> list[list[float]]:
    """The rows of numbers of the tables in text (markdown or `cse-kit eval`'s)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines() if "|" in line]
    return [[float(cell) for cell in row] for row in rows if all(re.fullmatch(r"\d+\.\d\d", cell) for cell in row)]


def column_names(text: str) -> list[list[str]]:
    """The header rows of the tables in text (markdown or `cse-kit eval`'s): rows of names, no number, no prose."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines() if "|" in line]
    return [row for row in rows if all(re.fullmatch(r"[A-Za-z][\w.-]*", cell) for cell in row)]


def test_the_readme_quotes_the_main_commands_column_names_as_printed():
    """`cse-kit eval` prints STSBenchmark and SICKRelatedness, which the README's table once called STS-B and SICK-R."""
    from cse_kit.eval import format_tables
    from cse_kit.eval.runner import STS_TASKS, TRANSFER_TASKS

    score = {"all": {"spearman": 80.0}, "test": {"spearman": 80.0}}
    result = {"model": "all-MiniLM-L6-v2", "pooler": "avg", "mode": "fasttest",
              "sts": {**{task: score for task in STS_TASKS}, "avg": 80.0},
              "transfer": {**{task: {"acc": 80.0} for task in TRANSFER_TASKS}, "avg": 80.0},
              "timings": {"distinct_sentences": 1, "encode_s": 1.0, "transfer_classifier_s": 1.0, "total_s": 2.0}}
    printed = column_names(format_tables(result))
    assert printed[0][5:7] == ["STSBenchmark", "SICKRelatedness"]
    assert column_names(quick_start()) == printed


@pytest.mark.slow  # about 6 minutes: every STS and transfer set encoded with all-MiniLM-L6-v2
def test_the_readme_main_command_prints_its_table(data_dir):
    command = block_with("cse-kit eval").strip()
    printed = subprocess.run(command, shell=True, cwd=REPO, env={**os.environ, "CSE_KIT_DATA": str(data_dir)},
                             capture_output=True, text=True, check=True).stdout
    assert numbers(printed) == numbers(quick_start()), printed
    assert column_names(printed) == column_names(quick_start()), printed
