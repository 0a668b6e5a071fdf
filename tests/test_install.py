"""The kit as a plain (non-editable) `pip install .` gives it: a wheel of the package alone, installed into a
temporary virtual environment that sees the running interpreter's packages (nothing is downloaded)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def see_the_running_interpreters_packages(venv) -> None:
    """venv imports what this interpreter imports from its package folders, whether it is a venv, a conda env or the
    system's Python: `venv --system-site-packages` would show it the base interpreter's instead (a venv's base has
    no torch). Plain paths in a .pth file: appended after the venv's own site-packages, their .pth files not run (this
    interpreter's editable cse_kit stays out)."""
    folders = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    [site_packages] = venv.glob("lib/python*/site-packages")
    (site_packages / "running-interpreter.pth").write_text("".join(f"{folder}\n" for folder in folders))


def test_a_plain_install_refuses_the_report_in_one_line_naming_the_editable_install(tmp_path):
    """`cse-kit report` executes notebooks/ beside the package; a wheel has none (the report once looked for
    site-packages/notebooks). It must say, in one line and at once, to use a clone with `pip install -e .`."""
    source = tmp_path / "source"
    shutil.copytree(REPO / "cse_kit", source / "cse_kit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv's own cse_kit, not this checkout's
    pip = ["-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([sys.executable, *pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                    str(tmp_path / "wheel"), str(source)], check=True, env=env, cwd=tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    see_the_running_interpreters_packages(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    [wheel] = (tmp_path / "wheel").glob("cse_kit-*.whl")
    subprocess.run([python, *pip, "install", "--no-deps", "--no-index", str(wheel)], check=True, env=env)
    installed = subprocess.run([python, "-c", "import cse_kit; print(cse_kit.__file__)"], capture_output=True,
                               text=True, check=True, env=env, cwd=tmp_path).stdout
    assert installed.startswith(str(tmp_path / "venv")), installed

    done = subprocess.run([tmp_path / "venv" / "bin" / "cse-kit", "report", "--profile", "smoke"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    [line] = done.stderr.splitlines()
    assert line.startswith("cse-kit: error: cse-kit report executes the notebooks of a clone") and \
        "`pip install -e .`" in line, line
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/reports"))  # nothing written there
