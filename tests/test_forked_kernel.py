"""The tests' kernels (tests/forked_kernel.py): forked from a server, yet the process jupyter_client started is the
kernel as jupyter_client sees it: interrupted, killed and shut down through it, with its exit status."""

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

import forked_kernel

PROBE = "import json, os, sys; print(json.dumps([os.getpid(), os.getppid(), sys.path[0], os.getcwd()]))"


def servers() -> str:
    [folder] = [p for p in os.environ["JUPYTER_PATH"].split(os.pathsep) if Path(p, "kernels", "python3").is_dir()]
    return folder


def output(client, code: str, timeout: float = 60) -> tuple[dict, str]:
    """The reply to `code`, and what it printed."""
    printed = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: printed.append(
        msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None)
    return reply["content"], "".join(printed)


def started(cwd: Path, env: dict | None = None):
    """A kernel started as papermill starts one (the `python3` kernelspec), and its client."""
    return start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env or dict(os.environ), startup_timeout=120)


def forked_kernel_of_this_environment(tmp_path):
    """A kernel forked from the server of this environment, the server started by a first kernel if need be."""
    socket = Path(servers(), f"{forked_kernel.signature(dict(os.environ))}.sock")
    if not socket.exists():
        manager, client = started(tmp_path)
        manager.shutdown_kernel()
        deadline = time.monotonic() + 120
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    return started(tmp_path)


def test_a_kernel_is_forked_from_the_server_and_runs_as_python_m_ipykernel_launcher(tmp_path):
    manager, client = forked_kernel_of_this_environment(tmp_path)
    launch = manager.provisioner.process
    try:
        _, printed = output(client, PROBE)
        pid, parent, path, cwd = json.loads(printed)
        server = int(Path(servers(), f"{forked_kernel.signature(dict(os.environ))}.pid").read_text())
        assert pid != launch.pid and parent == server
        assert path == cwd == str(tmp_path)
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


@pytest.mark.parametrize("differs", ["ANOTHER_ENVIRONMENT", forked_kernel.REAL])
def test_a_kernel_of_another_environment_or_asked_real_is_a_real_process(differs, tmp_path):
    """An environment no server was started for (one with TQDM_DISABLE set or not, read as tqdm is imported, before
    a server forks, is another; this one is the test's own), or one that asks for a real kernel."""
    value = "1" if differs == forked_kernel.REAL else str(tmp_path)
    manager, client = started(tmp_path, {**os.environ, differs: value})
    try:
        _, printed = output(client, PROBE)
        assert json.loads(printed)[0] == manager.provisioner.process.pid
    finally:
        manager.shutdown_kernel()
