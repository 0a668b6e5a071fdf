"""The `cse-kit` command: one module per command (its arguments and its handler) and `common` for what they share;
here the parser and `main`, which says an expected failure in one line. A command's module is imported only when that
command runs (or its --help is asked): `cse-kit --help` lists every command from common.PURPOSES, importing none."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from .common import DEBUG_ENV, PURPOSE, PURPOSES, Parser, debugging, error_line, stopped

#: each command's module, and the function of it that adds the command's parser
COMMANDS = {"data": ("data", "add_data"), "eval": ("eval", "add_eval"), "train": ("train", "add_train"),
            "fit-mlm-head": ("train", "add_fit_mlm_head"), "export-st": ("train", "add_export_st"),
            "publish": ("publish", "add_publish"), "report": ("report", "add_report"),
            "status": ("status", "add_status"), "doctor": ("doctor", "add_doctor"), "tune": ("tune", "add_tune")}

__all__ = ["COMMANDS", "DEBUG_ENV", "build_parser", "main"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with `only` of that one command in full and the others by name and purpose."""
    parser = Parser(prog="cse-kit", purpose=PURPOSE)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, add) in COMMANDS.items():
        if only in (None, name):
            getattr(importlib.import_module(f"{__name__}.{module}"), add)(sub)
        else:
            sub.add_parser(name, help=PURPOSES[name])
    return parser


def _named(argv: list[str]) -> str | None:
    """The command argv names (its first word that is not an option), where it is one."""
    words = [word for word in argv if not word.startswith("-")]
    return words[0] if words and words[0] in COMMANDS else None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_named(argv) or "").parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt as stop:  # every write is atomic and runs resume from their last checkpoint
        return stopped(args.command, stop)
    except Exception as error:
        line = error_line(args, error)
        if line is None:  # not a failure the kit expects: its traceback
            raise
        if debugging(args):
            traceback.print_exception(error)
        print(f"cse-kit: error: {line}", file=sys.stderr)
        return 2
