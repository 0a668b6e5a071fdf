"""`cse-kit` commands as processes of their own, started from a process that has already imported the kit.

A command's own start is most of a smoke command's cost: `python -m cse_kit.cli train` spends 7.0 of its 8.5 s
importing torch, transformers' BertModel and accelerate (AMD EPYC, AVX2 only, 2 cores; docs/install.md), and the
tests start about sixty commands to kill, signal, resume and race them. `popen` and `run` start the command in a
child forked from a server that imported those once per pytest worker (`multiprocessing`'s forkserver): the child is
a process of its own, with its own pid, session, signals, exit status and standard streams, running
`cse_kit.cli.main` as `python -m cse_kit.cli` does, and exiting as Python exits (threads joined, `atexit` run,
streams flushed; an uncaught Ctrl-C kills it with SIGINT). What a fork cannot give it, a real process gets instead:
an environment that differs from the server's in a variable read when a library is imported (the server was
started with `cli_env()`; only forking.RUNTIME_VARIABLES may differ).
The tests of what a command imports, and of the installed `cse-kit` script, start real processes."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import threading
from multiprocessing import reduction
from pathlib import Path

from conftest import cli_env
from forking import TRAINING_IMPORTS, compared, run_as_python, take_over

#: imported once by the server: what the training, evaluation, report and study commands import (a smoke run's
#: data, its evaluation's statistics and its TensorBoard log included: 1.4 of the 2.6 s it took forked without them),
#: and this module (each child is handed `_command`)
PRELOAD = [*TRAINING_IMPORTS, "optuna", "cse_kit.cli", "cse_kit.cli.train", "cse_kit.cli.eval", "cse_kit.cli.tune",
           "cse_kit.cli.report", "cse_kit.cli.publish", "kit_process"]
#: read by transformers when it is imported, and set in the child as that import would have set it
TRANSFORMERS_VERBOSITY = "TRANSFORMERS_VERBOSITY"


def _compared(name: str) -> bool:
    """Whether a variable must be the server's for a command to be forked."""
    return compared(name) and name != TRANSFORMERS_VERBOSITY


#: the server's environment: the tests' command environment (conftest.cli_env) as it stands when the test modules
#: are collected, before any test sets a variable of its own
SERVER_ENVIRONMENT = {k: v for k, v in cli_env().items() if _compared(k)}
_server_started = False
_lock = threading.Lock()


def popen(args, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=False, start_new_session=False,
          kill_before_checkpoint: int | None = None):
    """`subprocess.Popen([sys.executable, "-m", "cse_kit.cli", *args], ...)`, started from the server where the
    environment allows. `kill_before_checkpoint`: kill -9 the command as the checkpoint of that step is about to
    replace the one before (the audit hook `kill_before_checkpoint` below)."""
    env = dict(os.environ if env is None else env)
    if not _forkable(env):
        return subprocess.Popen(_real_argv(args, kill_before_checkpoint), env=env, cwd=cwd, stdin=stdin,
                                stdout=stdout, stderr=stderr, text=text, start_new_session=start_new_session)
    return KitProcess(list(map(str, args)), env, os.fspath(cwd or os.getcwd()), (stdin, stdout, stderr), text,
                      start_new_session, kill_before_checkpoint)


def run(args, input=None, capture_output=False, timeout=None, check=False, **kwargs):
    """`subprocess.run` of `popen`."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(args, **kwargs) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    done = subprocess.CompletedProcess(_real_argv(args, None), process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def _real_argv(args, kill_before_checkpoint):
    if kill_before_checkpoint is None:
        return [sys.executable, "-m", "cse_kit.cli", *map(str, args)]
    script = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import kit_process; "
              "kit_process.main_killed_before_checkpoint()")
    return [sys.executable, "-c", script, str(kill_before_checkpoint), *map(str, args)]


def kill_before_checkpoint(step: int):
    """An audit hook that kills its process with SIGKILL at a point of the run, not of the clock: as it is about to
    put checkpoint `step` in place (the rename of its complete folder to checkpoint/, whatever code does it).
    Everything of that step is done by then (its log line, evaluation and best model), none of it checkpointed: a
    resume redoes it from the checkpoint before."""

    def hook(event, args):
        if event == "os.rename" and Path(args[1]).name == "checkpoint":
            state = Path(args[0]) / "trainer_state.json"
            if state.is_file() and json.loads(state.read_text())["step"] == step:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def main_killed_before_checkpoint():
    """`python -c ... <step> <cse-kit arguments>`: the command with `kill_before_checkpoint(step)`, in a real
    process."""
    sys.addaudithook(kill_before_checkpoint(int(sys.argv.pop(1))))
    from cse_kit.cli import main

    sys.exit(main(sys.argv[1:]))


def _forkable(env: dict) -> bool:
    """Whether `env` is the server's in every compared variable; the server is started for the first that is."""
    if {k: v for k, v in env.items() if _compared(k)} != SERVER_ENVIRONMENT:
        return False
    with _lock:
        if not _server_started:
            _start_server()
    return True


def _start_server() -> None:
    """Start the forkserver with SERVER_ENVIRONMENT."""
    global _server_started
    saved = dict(os.environ)
    multiprocessing.set_forkserver_preload(PRELOAD)
    try:
        os.environ.clear()
        os.environ.update(SERVER_ENVIRONMENT)
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    _server_started = True


class _Fd:
    """A file descriptor handed to the forked child (the forkserver passes it over its socket)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _detach, (reduction.DupFd(self.fd),)


def _detach(duplicate) -> int:
    return duplicate.detach()


def _pipe_or_file(stream, reading: bool, ours: list):
    """(the child's end, the parent's end or None) for one of Popen's stdin/stdout/stderr arguments."""
    if stream is None:
        return None, None
    if stream == subprocess.PIPE:
        r, w = os.pipe()
        child, parent = (r, w) if reading else (w, r)
        ours.append(child)
        return child, parent
    if stream == subprocess.DEVNULL:
        ours.append(os.open(os.devnull, os.O_RDWR))
        return ours[-1], None
    return (stream if isinstance(stream, int) else stream.fileno()), None


class KitProcess:
    """The part of `subprocess.Popen` the tests use, for a command forked from the server."""

    def __init__(self, args, env, cwd, streams, text, start_new_session, kill_before_checkpoint):
        self.args, self.returncode = args, None
        ours: list[int] = []  # the child's ends of pipes, and /dev/null: closed here once the child has them
        (child_in, parent_in), (child_out, parent_out) = (_pipe_or_file(streams[0], True, ours),
                                                          _pipe_or_file(streams[1], False, ours))
        child_err, parent_err = ((child_out, None) if streams[2] == subprocess.STDOUT
                                 else _pipe_or_file(streams[2], False, ours))
        started, child_started = os.pipe()  # as Popen returns once its child is set up: session, streams
        ours.append(child_started)
        fds = [None if fd is None else _Fd(fd) for fd in (child_in, child_out, child_err, child_started)]
        self._process = multiprocessing.get_context("forkserver").Process(
            target=_command, args=(args, env, cwd, fds, start_new_session, kill_before_checkpoint), daemon=False)
        self._process.start()
        # a command a test leaves running does not hold pytest's exit, as a subprocess would not (multiprocessing
        # joins the children it lists when the interpreter exits)
        multiprocessing.process._children.discard(self._process)
        for fd in ours:
            os.close(fd)
        with open(started, "rb") as pipe:
            pipe.read()
        self.pid = self._process.pid
        self.stdin, self.stdout, self.stderr = (
            None if fd is None else open(fd, mode + ("" if text else "b"), **({"encoding": "utf-8"} if text else {}))  # noqa: SIM115
            for fd, mode in ((parent_in, "w"), (parent_out, "r"), (parent_err, "r")))

    def __enter__(self):
        return self

    def poll(self):
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout=None):
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        read = {}
        readers = [threading.Thread(target=lambda name=name, stream=stream: read.__setitem__(name, stream.read()),
                                    daemon=True) for name, stream in (("out", self.stdout), ("err", self.stderr))
                   if stream is not None]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return read.get("out"), read.get("err")

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def __exit__(self, *exc):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        if self.returncode is None:
            self.wait()


def _command(args, env, cwd, fds, start_new_session, kill_before_step):
    """The child: `python -m cse_kit.cli *args` in `cwd` with `env`, exiting as the interpreter would."""
    if start_new_session:
        os.setsid()
    *streams, started = fds
    take_over(streams, cwd, env)
    os.close(started)
    from transformers.utils import logging

    logging.set_verbosity(logging.log_levels.get(env.get(TRANSFORMERS_VERBOSITY, ""), logging.WARNING))
    from cse_kit.cli import main

    sys.argv = [os.path.join(os.path.dirname(sys.modules["cse_kit.cli"].__file__), "__main__.py"), *args]
    if kill_before_step is not None:
        sys.addaudithook(kill_before_checkpoint(kill_before_step))
    run_as_python(lambda: main(args))
