"""The `cse-kit` command's own behaviour: every command's --help opens with what it is for, a misspelt results store
is refused, --debug shows what a one-line error hides."""

import argparse
import re

import pytest

from cse_kit import cli
from test_write_failures import one_error_line


def commands(parser: argparse.ArgumentParser, path: tuple = ()) -> list[tuple]:
    """Every command line's words down to a parser of its own: (), ("data",), ("data", "status"), ("eval",), ..."""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, (*path, name))
    return found


ALL_COMMANDS = commands(cli.build_parser())


def help_of(path: tuple, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*path, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_command_tree_is_the_kits_commands():
    assert {path[0] for path in ALL_COMMANDS if path} == {
        "data", "eval", "train", "fit-mlm-head", "export-st", "publish", "report", "status", "doctor", "tune"}
    assert {path for path in ALL_COMMANDS if path[:1] == ("data",)} == {
        ("data",), ("data", "download"), ("data", "import"), ("data", "status")}


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda path: " ".join(path) or "cse-kit")
def test_every_help_opens_with_a_sentence_saying_what_the_command_is_for(path, capsys):
    text = help_of(path, capsys)
    first_line = text.splitlines()[0]
    assert first_line.strip() and not first_line.startswith("usage:"), text
    purpose = " ".join(text.split("\n\n", 1)[0].split())  # the opening paragraph, unwrapped
    assert re.fullmatch(r"[A-Z][^\n]{20,}[.?]", purpose), purpose
    assert f"\n\nusage: cse-kit {' '.join(path)}".rstrip() in text  # the usage follows it


def test_no_two_commands_say_the_same_purpose(capsys):
    purposes = [help_of(path, capsys).split("\n\n", 1)[0] for path in ALL_COMMANDS]
    assert len(set(purposes)) == len(purposes)


@pytest.mark.parametrize("argv", [["status"], ["status", "--stale"], ["report", "--list"],
                                  ["publish", "some-key", "--out", "card"]], ids=" ".join)
def test_a_results_dir_that_is_not_a_folder_is_refused_in_one_line(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    misspelt = tmp_path / "reslts"
    assert cli.main([*argv, "--results-dir", str(misspelt)]) == 2
    assert one_error_line(capsys) == (
        f"cse-kit: error: --results-dir {misspelt} is not a results store: it does not exist. Check the path (a store "
        "is the folder `cse-kit report` and the notebooks write into, by default reports/results)")
    misspelt.write_text("not a store")
    assert cli.main([*argv, "--results-dir", str(misspelt)]) == 2
    assert f"--results-dir {misspelt} is not a results store: it is a file." in one_error_line(capsys)
    assert not (tmp_path / "card").exists()


def test_an_empty_results_store_is_read_as_one(tmp_path, capsys):
    (tmp_path / "store").mkdir()
    assert cli.main(["status", "--results-dir", str(tmp_path / "store")]) == 0
    assert capsys.readouterr().out.startswith(f"no saved tables in {tmp_path / 'store'}: run a notebook")


def test_debug_shows_the_traceback_of_an_error_said_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["status", "--results-dir", str(tmp_path / "reslts"), "--debug"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and "in check_results_dir" in "\n".join(err)
    assert err[-1].startswith(f"cse-kit: error: --results-dir {tmp_path / 'reslts'} is not a results store")
    monkeypatch.setenv(cli.DEBUG_ENV, "0")  # 0 is off
    assert cli.main(["status", "--results-dir", str(tmp_path / "reslts")]) == 2
    one_error_line(capsys)
