"""tests/kit_process.py, which the tests' commands start from: a forked command is the real command's equal. The
commands here run in the server's own environment (kit_process.SERVER_ENVIRONMENT), so that they are forked whatever
an earlier test of this worker left in its environment."""

import os
import signal
import subprocess
import sys

import psutil

import kit_process

BAD_TASK = ["eval", "--model", "all-MiniLM-L6-v2", "--pooler", "avg", "--tasks", "STS17"]


def test_a_forked_command_says_and_exits_what_the_real_one_does():
    env = kit_process.SERVER_ENVIRONMENT
    real = subprocess.run([sys.executable, "-m", "cse_kit.cli", *BAD_TASK], env=env, capture_output=True, text=True,
                          timeout=120)
    forked = kit_process.run(BAD_TASK, env=env, capture_output=True, text=True, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == 2 and "unknown task(s) STS17" in real.stderr


def test_a_forked_command_is_a_process_of_its_own_in_its_own_session_and_dies_by_its_signal(tmp_path):
    process = kit_process.popen(["eval", "--help"], env=kit_process.SERVER_ENVIRONMENT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert psutil.Process(process.pid).ppid() != os.getpid()  # forked by the server, not started here
        assert os.getsid(process.pid) == process.pid
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL


def test_an_environment_read_when_a_library_is_imported_gets_a_real_process(tmp_path):
    """HF_HOME is read when huggingface_hub is imported: a command with another one is started as a real process."""
    process = kit_process.popen(["eval", "--help"], env={**kit_process.SERVER_ENVIRONMENT, "HF_HOME": str(tmp_path)},
                                stdout=subprocess.DEVNULL)
    assert psutil.Process(process.pid).ppid() == os.getpid()
    assert process.wait(timeout=120) == 0
