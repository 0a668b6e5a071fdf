"""Python programs for the tests, Jupyter kernels first, forked from a server that has already imported the kit.

A smoke notebook's kernel spends most of its CPU importing torch, pandas, the kit and ipykernel (about 5 of its 7
CPU-seconds, AMD EPYC with AVX2 only, 2 cores), and the tests run about thirty. conftest writes a `python3`
kernelspec into a folder of its own on JUPYTER_PATH, so that every kernel the tests start (papermill in the tests'
process, the report's commands and workers, JupyterLab) runs this file; a test that runs a command as a user types
it (`cse-kit ...` in a shell, a bench script) runs it through `launcher` or `command`:

    python tests/forked_python.py <servers folder> -m ipykernel_launcher -f <connection file> [ipykernel's arguments]
    python tests/forked_python.py <servers folder> -m cse_kit.cli train ...
    python tests/forked_python.py <servers folder> bench/train_speed.py ...

That process is the program its caller knows: it asks the server for its environment to fork the program, hands it
its standard streams, passes on every signal it receives, exits as the program exits (killed by the same signal),
and when it is killed (SIGKILL: jupyter_client's last resort) the server kills the program. Like ipykernel's own
parent poller, it stops the program when the process that started it is gone. The program runs as `python -m
module` or `python script` runs it, in the caller's folder, with its environment, in a session of its own.

A server is started (detached) the first time an environment asks for one, and that program starts as a real
`python` process (exec'd: the same pid); so does every program whose server is not yet listening. An environment is
the server's when every variable but forking's RUNTIME_VARIABLES and SHELL_VARIABLES is the same: the rest may be
read when a library is imported (TQDM_DISABLE by tqdm, OMP_NUM_THREADS by torch). conftest stops the servers at the
end.

This file imports only the standard library until it serves: the process its caller starts costs what a
`python -c pass` costs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shlex
import signal
import socket
import struct
import sys

from forking import TRAINING_IMPORTS, compared, run_as_python, take_over

#: imported once by the server: what a table notebook's first cell and ipykernel import, what its runs' training
#: does, and the commands that train and evaluate; not matplotlib, whose backend ipykernel chooses as the kernel starts
#: (MPLBACKEND)
PRELOAD = (*TRAINING_IMPORTS, "cse_kit.experiments", "pandas", "ipykernel.kernelapp", "ipykernel.ipkernel",
           "ipykernel.zmqshell", "cse_kit.cli", "cse_kit.cli.train", "cse_kit.cli.eval")
#: the signals a program's process receives from jupyter_client, a terminal or a test, passed on to the forked program
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
STREAMS = 3  # stdin, stdout, stderr
#: set to 1, the program is a real process: for a test of the process tree under the one that started it (a forked
#: program, and what it starts, are the server's descendants)
REAL = "CSE_KIT_TEST_REAL_PROCESS"
#: the servers' folder's name begins with it (conftest's temporary folder)
PREFIX = "cse-kit-test-servers-"


def signature(env: dict) -> str:
    """The name of the server for `env`: a digest of its variables that must be the server's."""
    variables = sorted((k, v) for k, v in env.items() if compared(k))
    return hashlib.sha256(json.dumps(variables).encode()).hexdigest()[:16]


def kernel_spec(servers: str, native: dict) -> dict:
    """The `python3` kernelspec whose kernels are forked: ipykernel's own (`native`: `python -m ipykernel_launcher
    ...`), this file before its arguments."""
    return {**native, "argv": [*command(servers), *native["argv"][1:]]}


def command(servers: str | None = None) -> list[str]:
    """What stands for `python` in a command line: `[*command(), "-m", "cse_kit.cli", ...]` is `python -m cse_kit.cli
    ...`, forked. servers: the folder conftest made (default: the one on JUPYTER_PATH)."""
    return [sys.executable, os.path.abspath(__file__), servers or servers_folder()]


def servers_folder() -> str:
    """The servers' folder conftest put on JUPYTER_PATH (its `python3` kernelspec's)."""
    [folder] = [p for p in os.environ["JUPYTER_PATH"].split(os.pathsep)
                if os.path.isdir(os.path.join(p, "kernels", "python3")) and os.path.basename(p).startswith(PREFIX)]
    return folder


def launcher(folder, name: str, *python_args: str) -> None:
    """An executable `folder/name` that runs `python *python_args "$@"`, forked: a shell's `cse-kit` (`launcher(bin,
    "cse-kit", "-m", "cse_kit.cli")`) as a user's terminal runs it."""
    path = os.path.join(folder, name)
    with open(path, "w") as script:
        script.write(f"#!/bin/sh\nexec {shlex.join([*command(), *python_args])} \"$@\"\n")
    os.chmod(path, 0o755)


def stop_servers(servers: str) -> None:
    """SIGTERM to every server started for `servers` (their pid files)."""
    for pid_file in os.scandir(servers):
        if pid_file.name.endswith(".pid"):
            with contextlib.suppress(OSError, ValueError), open(pid_file.path) as pid:
                os.kill(int(pid.read()), signal.SIGTERM)


# --- the process the caller starts (jupyter_client, a shell, a test) --------------------------------------------------

def client(servers: str, args: list[str]) -> None:
    env = dict(os.environ)
    if env.get(REAL) == "1":
        _real(args)
    name = signature(env)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(os.path.join(servers, f"{name}.sock"))
    except OSError:
        connection.close()
        _start_server(servers, name)
        _real(args)
    request = json.dumps({"args": args, "cwd": os.getcwd(), "env": env}).encode()
    socket.send_fds(connection, [struct.pack("!I", len(request))], list(range(STREAMS)))
    connection.sendall(request)
    replies = connection.makefile("rb")
    program = int(replies.readline())
    for sig in FORWARDED:
        signal.signal(sig, lambda number, frame: _signal(program, number))
    parent = os.getppid()
    while not select.select([connection], [], [], 1.0)[0]:
        if os.getppid() != parent:  # as ipykernel's parent poller: the process that started it is gone
            _signal(program, signal.SIGKILL)
            os._exit(1)
    status = replies.readline()
    code = os.waitstatus_to_exitcode(int(status)) if status else -signal.SIGKILL
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _real(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *args])


def _signal(program: int, number: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(program, number)  # the program's process group, as jupyter_client signals a kernel's


def _start_server(servers: str, name: str) -> None:
    """Start the server for this environment, detached, unless another program already did."""
    try:
        os.close(os.open(os.path.join(servers, f"{name}.started"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    if os.fork() == 0:  # a grandchild, so that nothing waits for it; its streams are not the program's
        os.setsid()
        if os.fork() == 0:
            os.dup2(os.open(os.devnull, os.O_RDWR), 0)
            log = os.open(os.path.join(servers, f"{name}.log"), os.O_CREAT | os.O_WRONLY | os.O_APPEND)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "--serve", servers, name])
        os._exit(0)
    os.wait()


# --- the server ------------------------------------------------------------------------------------------------------

def serve(servers: str, name: str) -> None:
    import importlib
    import selectors

    for module in PRELOAD:
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = os.path.join(servers, f"{name}.sock")
    listener.bind(f"{path}.{os.getpid()}")
    listener.listen(16)
    os.replace(f"{path}.{os.getpid()}", path)  # clients connect once it listens
    with open(os.path.join(servers, f"{name}.pid"), "w") as pid_file:
        pid_file.write(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    while os.path.isdir(servers):  # conftest removes the folder once it has stopped the servers
        for key, _ in events.select(timeout=60):
            if key.fileobj is listener:
                _fork_program(listener, events)
            elif key.data[0] == "exited":  # the program ended: its status to its client, if it is still there
                _, program, connection = key.data
                events.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(program, 0)
                if connection.fileno() >= 0:
                    events.unregister(connection)
                    with contextlib.suppress(OSError):
                        connection.sendall(f"{status}\n".encode())
                    connection.close()
            elif key.fileobj.fileno() >= 0:  # the client closed its end first: it was killed, and so is the program
                events.unregister(key.fileobj)
                key.fileobj.close()
                _signal(key.data[1], signal.SIGKILL)


def _fork_program(listener, events) -> None:
    import selectors

    connection, _ = listener.accept()
    header, streams, _, _ = socket.recv_fds(connection, 4, STREAMS)
    size = struct.unpack("!I", header)[0]
    request = b""
    while len(request) < size:
        request += connection.recv(size - len(request))
    request = json.loads(request)
    sys.stdout.flush()
    sys.stderr.flush()
    program = os.fork()
    if program == 0:  # the others' connections and pidfds closed, or the server would miss their clients' end
        for key in list(events.get_map().values()):
            os.close(key.fd)
        connection.close()
        _program(request, streams)
    for fd in streams:
        os.close(fd)
    connection.sendall(f"{program}\n".encode())
    events.register(os.pidfd_open(program), selectors.EVENT_READ, ("exited", program, connection))
    events.register(connection, selectors.EVENT_READ, ("client", program))


def _program(request: dict, streams: list[int]) -> None:
    """The forked program: `python *args` (`-m module ...` or `script ...`) in the client's folder and environment."""
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handler
    take_over(streams, request["cwd"], request["env"])
    import runpy

    args = request["args"]
    if args[0] == "-m":  # runpy puts the module's file first in sys.argv, as `python -m` does
        sys.argv, sys.path[0] = [args[1], *args[2:]], request["cwd"]

        def main():
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv, sys.path[0] = list(args), os.path.dirname(os.path.abspath(args[0]))

        def main():
            runpy.run_path(args[0], run_name="__main__")
    run_as_python(main)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(*sys.argv[2:4])
    else:
        client(sys.argv[1], sys.argv[2:])
