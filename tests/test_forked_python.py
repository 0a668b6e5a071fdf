"""The tests' kernels and programs (tests/forked_python.py): forked from a server, yet the process jupyter_client
started is the kernel as jupyter_client sees it (interrupted, killed and shut down through it, with its exit status),
and a program runs as python runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

import forked_python

PROBE = "import json, os, sys; print(json.dumps([os.getpid(), os.getppid(), sys.path[0], os.getcwd()]))"


def output(client, code: str, timeout: float = 60) -> tuple[dict, str]:
    """The reply to `code`, and what it printed."""
    printed = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: printed.append(
        msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None)
    return reply["content"], "".join(printed)


def started(cwd: Path, env: dict | None = None):
    """A kernel started as papermill starts one (the `python3` kernelspec), and its client."""
    return start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env or dict(os.environ), startup_timeout=120)


def server_of_this_environment(tmp_path) -> int:
    """The pid of the server of this environment, started by a first kernel if need be."""
    folder, name = forked_python.servers_folder(), forked_python.signature(dict(os.environ))
    socket, pid = Path(folder, f"{name}.sock"), Path(folder, f"{name}.pid")
    if not socket.exists():
        manager, client = started(tmp_path)
        manager.shutdown_kernel()
    deadline = time.monotonic() + 120
    while not (socket.exists() and pid.exists() and pid.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return int(pid.read_text())


def forked_kernel_of_this_environment(tmp_path):
    """A kernel forked from the server of this environment."""
    server_of_this_environment(tmp_path)
    return started(tmp_path)


def test_a_kernel_is_forked_from_the_server_and_runs_as_python_m_ipykernel_launcher(tmp_path):
    manager, client = forked_kernel_of_this_environment(tmp_path)
    launch = manager.provisioner.process
    try:
        _, printed = output(client, PROBE)
        pid, parent, path, cwd = json.loads(printed)
        assert pid != launch.pid and parent == server_of_this_environment(tmp_path)
        assert cwd == str(tmp_path) and path != cwd  # ipykernel_launcher takes the folder off sys.path, as it runs
        assert os.getsid(pid) == pid  # a session of its own, as a kernel jupyter_client starts
    finally:
        manager.shutdown_kernel()
    assert launch.wait(10) == 0
    assert not psutil.pid_exists(pid)


def test_an_interrupt_reaches_the_kernel_and_a_killed_launch_kills_it(tmp_path):
    manager, client = forked_kernel_of_this_environment(tmp_path)
    launch = manager.provisioner.process
    _, printed = output(client, PROBE)
    pid = json.loads(printed)[0]
    client.execute("import time; time.sleep(60)")
    time.sleep(1)
    manager.interrupt_kernel()
    reply = client.get_shell_msg(timeout=20)["content"]
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    os.kill(launch.pid, signal.SIGKILL)
    assert launch.wait(10) == -signal.SIGKILL
    psutil.Process(pid).wait(10)  # raises TimeoutExpired while the kernel lives
    manager.cleanup_resources()


def test_a_kernel_killed_by_a_signal_ends_its_launch_by_that_signal(tmp_path):
    manager, client = forked_kernel_of_this_environment(tmp_path)
    _, printed = output(client, PROBE)
    os.kill(json.loads(printed)[0], signal.SIGTERM)
    assert manager.provisioner.process.wait(10) == -signal.SIGTERM
    manager.cleanup_resources()


@pytest.mark.parametrize("differs", ["ANOTHER_ENVIRONMENT", forked_python.REAL])
def test_a_kernel_of_another_environment_or_asked_real_is_a_real_process(differs, tmp_path):
    """An environment no server was started for (one with TQDM_DISABLE set or not, read as tqdm is imported, before
    a server forks, is another; this one is the test's own), or one that asks for a real kernel."""
    value = "1" if differs == forked_python.REAL else str(tmp_path)
    manager, client = started(tmp_path, {**os.environ, differs: value})
    try:
        _, printed = output(client, PROBE)
        assert json.loads(printed)[0] == manager.provisioner.process.pid
    finally:
        manager.shutdown_kernel()


#: a program that says how it runs, and exits 3
PROGRAM = """import json, os, sys
print(json.dumps({"ppid": os.getppid(), "argv": sys.argv, "path": sys.path[0], "cwd": os.getcwd(), "name": __name__}))
sys.exit(3)
"""


@pytest.mark.parametrize("how", [["-m", "probe_program"], ["probe_program.py"]], ids=["module", "script"])
def test_a_program_is_forked_and_runs_as_python_runs_it(how, tmp_path):
    """`command() -m module ...` and `command() script ...`: forked from the server, with the arguments, sys.path[0],
    folder, `__main__` and exit status that `python -m module ...` and `python script ...` give."""
    (tmp_path / "probe_program.py").write_text(PROGRAM)
    args = [*how, "an argument", "--flag"]
    env = dict(os.environ)  # explicitly: a process's C environment may hold more (COLUMNS, LINES under pytest)
    real = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    server = server_of_this_environment(tmp_path)
    forked = subprocess.run([*forked_python.command(), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert (forked.returncode, real.returncode) == (3, 3), forked.stderr
    ran, expected = json.loads(forked.stdout), json.loads(real.stdout)
    assert ran["ppid"] == server  # forked: the server's child, not the launch's exec'd python
    assert {k: ran[k] for k in ("argv", "path", "cwd", "name")} == {k: expected[k] for k in ("argv", "path", "cwd",
                                                                                             "name")}
