"""What the `cse-kit` commands share: the parser class, the arguments several take, the signal handling, and the one
line an expected failure is said in."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import signal
import sys
import textwrap
from pathlib import Path

from ..io import WriteFailed

PURPOSE = ("Reproduce contrastive sentence-embedding papers (DiffCSE, SCD, ESimCSE, DiffAug; SimCSE the baseline): "
           "get the data, evaluate and train models, build the report of every paper table.")
DEBUG_ENV = "CSE_KIT_DEBUG"
#: each command's purpose, said by its --help and by `cse-kit --help` (which imports no command to list them)
PURPOSES = {
    "data": "Download, import and check the datasets the kit evaluates and trains on.",
    "doctor": "Check, before spending GPU-hours, that this machine and its library stack reproduce the kit's "
              "reference numbers: one line per check; exit 1 when one differs beyond its tolerance.",
    "eval": "Evaluate a model with the papers' SentEval protocol (STS and transfer tasks), or with MTEB "
            "(--benchmark mteb).",
    "publish": "Make a trained run a folder to share: the model (sentence-transformers where it can be), its model "
               "card from the run's record, MTEB's results layout; --push uploads it to the Hugging Face Hub.",
    "report": "Execute (or reuse) every paper table's notebook and build the HTML report, reports/index.html.",
    "status": "Show which of the four papers' tables and figures the results store holds (the coverage matrix); "
              "executes nothing.",
    "train": "Train a preset (SimCSE, DiffCSE, SCD, ESimCSE, DiffAug, ...) on a profile; an interrupted run "
             "resumes.",
    "fit-mlm-head": "Fit the masked-LM head of an encoder-only checkpoint: a DiffCSE generator where no masked-LM "
                    "checkpoint is available.",
    "export-st": "Save a kit-trained model as a sentence-transformers model.",
    "tune": "Search a preset's settings with Optuna (seeded TPE) at a budget of trials, each a run of the results "
            "store selected on its dev score; then test the chosen configuration over seeds.",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a scheduler's stop), raised where the process is, so that what it was writing is removed as
    on Ctrl-C and the command says that it stopped."""


def _raise_terminated(signum, frame):
    raise Terminated


class Parser(argparse.ArgumentParser):
    """argparse's parser whose --help opens with what the command is for (`purpose`, one sentence) above its usage,
    and which takes --debug wherever it stands (`cse-kit --debug train ...` or `cse-kit train ... --debug`)."""

    def __init__(self, *args, purpose: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.purpose = purpose
        # SUPPRESS: a subcommand's parser leaves the top parser's --debug as given
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                          help=f"on an error, show its traceback above its one line (= ${DEBUG_ENV}=1)")

    def format_help(self) -> str:
        width = max(shutil.get_terminal_size().columns - 2, 40)  # argparse's own width
        return textwrap.fill(self.purpose, width) + "\n\n" + super().format_help()


def command(sub, name: str, handler, purpose: str | None = None, **kwargs) -> Parser:
    """A subcommand: its --help and the list in `cse-kit --help` say its purpose (PURPOSES[name] unless given);
    handler(args) runs it."""
    purpose = purpose or PURPOSES[name]
    p = sub.add_parser(name, help=purpose, purpose=purpose, **kwargs)
    p.set_defaults(func=handler)
    return p


def log_with_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-with", metavar="NAME[,NAME]",
                   help="trackers of the training curves: none, or Accelerate's (tensorboard, wandb, mlflow, trackio, "
                        "aim, comet_ml, clearml, dvclive, swanlab); default: $CSE_KIT_LOG_WITH, else tensorboard where "
                        "it is installed (event files beside each run's log.jsonl)")


def data_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=None,
                   help="data directory (default: $CSE_KIT_DATA, else data/ in the repository)")


def results_dir_arg(p: argparse.ArgumentParser, what: str = "results store") -> None:
    p.add_argument("--results-dir", help=f"{what} (default: $CSE_KIT_RESULTS or reports/results)")


def check_results_dir(results_dir) -> None:
    """Refuse a --results-dir that is not a folder before reading it: a misspelt path would read as a store with
    nothing in it (no saved table, no stale record)."""
    if results_dir and not Path(results_dir).is_dir():
        what = "is a file" if Path(results_dir).exists() else "does not exist"
        raise ValueError(f"--results-dir {results_dir} is not a results store: it {what}. Check the path (a store is "
                         "the folder `cse-kit report` and the notebooks write into, by default reports/results)")


def check_at_least_one(**counts: int | None) -> None:
    """Refuse a count below 1 (--workers, --jobs, --trials), in one line naming it."""
    for name, count in counts.items():
        if count is not None and count < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {count}")


@contextlib.contextmanager
def signals_restored(*signums: int):
    """The handlers of `signums` as they were before the block, whatever the block installs."""
    before = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def terminating():
    """SIGTERM raised as Terminated (a KeyboardInterrupt) while the block runs; the handler before it restored."""
    with signals_restored(signal.SIGTERM):
        signal.signal(signal.SIGTERM, _raise_terminated)
        yield


@contextlib.contextmanager
def resumable(words):
    """A stop (Ctrl-C, SIGTERM) inside the block says `words()` as what running the same command again does (the
    block's own words where it has them: the run folder and its checkpoint's step, the study)."""
    try:
        yield
    except KeyboardInterrupt as stop:
        stop.resumes = words()
        raise


def debugging(args) -> bool:
    """--debug given, or $CSE_KIT_DEBUG set to anything but empty or 0."""
    return getattr(args, "debug", False) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def error_line(args, error: Exception) -> str | None:
    """The one line an expected failure is said in; None for any other exception."""
    # imported when a failure is said: `cse-kit --help` imports neither torch nor the kit's layers
    from ..data import DataError
    from ..methods.registry import PluginError
    from ..models import ModelNotFoundError
    from ..train.loop import NonFiniteLoss

    if isinstance(error, WriteFailed):
        resumes = ": it resumes where it stopped" if args.command in ("train", "report") else ""
        return (f"{error}. Free space there (or raise the file size limit, `ulimit -f`) and run the same command "
                f"again{resumes}")
    if isinstance(error, PluginError):  # the researcher's own code failed: where to read its traceback
        return f"{error}" + ("" if debugging(args) else f" (rerun with --debug or {DEBUG_ENV}=1 for its traceback)")
    if isinstance(error, (DataError, ModelNotFoundError, NonFiniteLoss, KeyError, ValueError, FileNotFoundError,
                          ImportError)):
        return f"{error}"
    if isinstance(error, PermissionError) or (isinstance(error, OSError) and error.errno == errno.EROFS):
        return (f"cannot write {error.filename or 'a file'} ({error.strerror}): choose a folder you can write "
                "(--output-dir, --results-dir, --out, --data-dir) or change its permissions")
    return None


def stopped(command: str, stop: KeyboardInterrupt) -> int:
    """Ctrl-C or SIGTERM: said in one line, with what rerunning the command does (resumable's words; a training run
    and the report resume, anything else starts again)."""
    again = getattr(stop, "resumes", "resume" if command in ("train", "report") else "start again")
    if isinstance(stop, Terminated):
        print(f"cse-kit: stopped by SIGTERM; nothing half-written is kept. Rerun the same command to {again}.",
              file=sys.stderr)
        return 128 + signal.SIGTERM
    print(f"\ncse-kit: interrupted; nothing half-written is kept. Rerun the same command to {again}.", file=sys.stderr)
    return 130
