"""A plugin that fails to import (issue 68 item 5): `cse-kit` says it in one line naming the plugin, what it raised
and how to see the traceback, exits 2; with --debug or $CSE_KIT_DEBUG the traceback is shown above that line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cse_kit import cli
from cse_kit.methods import registry
from test_write_failures import one_error_line

#: a command that loads the plugins: `mine` is no method of the kit's, so they are imported to find it
TRAIN = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--set", "method=mine"]
HINT = "(rerun with --debug or CSE_KIT_DEBUG=1 for its traceback)"
#: each failure: the plugin's source, and what its one line says it raised
FAILURES = {
    "raising": ('raise RuntimeError("no GPU for my loss")\n', "RuntimeError: no GPU for my loss"),
    "syntax_error": ("def loss(:\n    pass\n", "SyntaxError: invalid syntax (syntax_error.py, line 1)"),
    "missing_package": ("import a_package_nobody_installed\n",
                        "ModuleNotFoundError: No module named 'a_package_nobody_installed'"),
}


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A folder for plugin files, without $CSE_KIT_DEBUG; the modules a failed import leaves in sys.modules are
    forgotten after."""
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _entry_point_site(folder: Path) -> Path:
    """An installed distribution `broken-method` 1.0 whose `cse_kit.methods` entry point raises on import."""
    site = folder / "site"
    info = site / "broken_method-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-method\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[cse_kit.methods]\nmine = by_entry\n")
    (site / "by_entry.py").write_text('raise RuntimeError("no GPU for my loss")\n')
    return site


@pytest.mark.parametrize("name", FAILURES)
def test_a_plugin_file_that_fails_to_import_is_one_line_naming_it(plugins, name, monkeypatch, capsys):
    source, raised = FAILURES[name]
    path = plugins / f"{name}.py"
    path.write_text(source)
    monkeypatch.setenv(registry.PLUGINS_ENV, str(path))
    assert cli.main(TRAIN) == 2
    assert one_error_line(capsys) == f"cse-kit: error: plugin {path} failed to import: {raised} {HINT}"


def test_a_plugin_module_by_import_path_that_fails_to_import_is_named_as_given(plugins, monkeypatch, capsys):
    (plugins / "raising.py").write_text(FAILURES["raising"][0])
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setenv(registry.PLUGINS_ENV, "raising")
    assert cli.main(TRAIN) == 2
    assert one_error_line(capsys) == ("cse-kit: error: plugin module 'raising' failed to import: RuntimeError: no GPU "
                                      f"for my loss {HINT}")


def test_an_entry_point_that_fails_to_import_is_named_with_its_distribution(plugins, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(_entry_point_site(plugins)))
    monkeypatch.delenv(registry.PLUGINS_ENV, raising=False)
    assert cli.main(TRAIN) == 2
    assert one_error_line(capsys) == ("cse-kit: error: plugin mine = by_entry (entry point of broken-method 1.0, group "
                                      f"cse_kit.methods) failed to import: RuntimeError: no GPU for my loss {HINT}")


@pytest.mark.parametrize("asked", ["--debug after the command", "--debug before it", "CSE_KIT_DEBUG=1"])
def test_debug_shows_the_plugins_traceback_above_its_line(plugins, asked, monkeypatch, capsys):
    path = plugins / "raising.py"
    path.write_text(FAILURES["raising"][0])
    monkeypatch.setenv(registry.PLUGINS_ENV, str(path))
    argv = {"--debug after the command": [*TRAIN, "--debug"], "--debug before it": ["--debug", *TRAIN]}.get(asked)
    if argv is None:
        monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.main(argv or TRAIN) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert f'  File "{path}", line 1, in <module>' in err  # the plugin's own frame
    assert "RuntimeError: no GPU for my loss" in err
    assert err[-1] == f"cse-kit: error: plugin {path} failed to import: RuntimeError: no GPU for my loss"


def test_the_installed_command_names_an_entry_point_plugin_and_shows_its_traceback_under_cse_kit_debug(plugins):
    env = {**os.environ, "PYTHONPATH": str(_entry_point_site(plugins))}
    env.pop(registry.PLUGINS_ENV, None)
    command = ["cse-kit", *TRAIN, "--output-dir", str(plugins / "run")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "cse-kit: error: plugin mine = by_entry (entry point of broken-method 1.0, group cse_kit.methods) failed to "
        f"import: RuntimeError: no GPU for my loss {HINT}"]
    done = subprocess.run(command, env={**env, cli.DEBUG_ENV: "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback (most recent call last):" in done.stderr
    assert 'by_entry.py", line 1, in <module>' in done.stderr
