"""One run folder, one trainer: a second `cse-kit train` into a folder waits for the first, naming it (pid, host,
start time, from the lock file); a holder that is alive but stopped is reported; SIGTERM says that the run stopped
and from which step it resumes."""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import kit_process
import pytest

HOLD = "from cse_kit.io import holder_lock; import sys, time; lock = holder_lock(sys.argv[1]); lock.acquire(); " \
       "print('held', flush=True); time.sleep(600)"


def test_a_held_lock_names_its_holder_and_a_stopped_holder_is_reported(tmp_path):
    from cse_kit.io import acquire_or_wait, holder_lock, lock_holder

    path = tmp_path / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        said = lock_holder(path)
        assert (said["pid"], said["host"]) == (holder.pid, socket.gethostname())
        assert time.time() - time.mktime(time.strptime(said["since"], "%Y-%m-%d %H:%M:%S %z")) < 120
        os.kill(holder.pid, signal.SIGSTOP)  # alive, holding the lock, making no progress
        messages = []
        waiter = threading.Thread(target=acquire_or_wait, args=(holder_lock(path), "waiting for it", messages.append),
                                  kwargs={"stopped_after": 0.5, "poll": 0.1})
        waiter.start()
        deadline = time.time() + 30
        while len(messages) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert messages[0] == f"waiting for it; held by pid {holder.pid} on host {socket.gethostname()} since " \
                              f"{said['since']} ({path})"
        assert "which is stopped (SIGSTOP, Ctrl-Z or a suspended job)" in messages[1]
        assert f"continue it (`kill -CONT {holder.pid}`) or end it (`kill {holder.pid}`)" in messages[1]
        assert waiter.is_alive()  # reported, still waiting
    finally:
        holder.kill()
        holder.wait()
    waiter.join(30)
    assert not waiter.is_alive() and lock_holder(path)["pid"] == os.getpid()  # the dead holder's lock is free


TRAIN = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--no-progress", "--set", "epochs=10000",
         "--set", "save_steps=2", "--set", "eval_steps=100000"]


def _line(stream, timeout=300) -> str:
    """The next line of a child's pipe, or "" when none comes within timeout seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else ""


def test_a_second_trainer_into_a_held_run_folder_waits_naming_the_holder_and_sigterm_says_it_stopped(
        data_dir, tmp_path):
    from cse_kit.io import lock_holder

    run, lock = tmp_path / "run", tmp_path / ".run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    second = None
    try:
        assert holder.stdout.readline() == "held\n"
        second = kit_process.popen([*TRAIN, "--data-dir", str(data_dir),
                                    "--output-dir", str(run)], env={**os.environ, "HF_HUB_OFFLINE": "1"}, text=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert _line(second.stderr) == (
            f"cse-kit: waiting for {run}: another trainer trains into it; held by pid {holder.pid} on host "
            f"{socket.gethostname()} since {lock_holder(lock)['since']} ({lock})\n")
        time.sleep(1)
        assert second.poll() is None and not run.exists()  # waits, trains nothing
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 128 + signal.SIGTERM
        assert err.splitlines()[-1] == ("cse-kit: stopped by SIGTERM; nothing half-written is kept. Rerun the same "
                                        f"command to train {run} (it stopped before its first checkpoint: from step "
                                        "0).")
    finally:
        for proc in (holder, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def _checkpoint_step(run):
    return json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"]


def test_sigterm_to_a_training_run_says_that_it_stopped_and_from_which_step_it_resumes(data_dir, tmp_path, capsys):
    from cse_kit import cli

    run = tmp_path / "run"
    state = run / "checkpoint" / "trainer_state.json"

    finished = threading.Event()

    def terminate_after_a_checkpoint():
        while not state.is_file():
            if finished.wait(0.05):  # the command ended without a checkpoint: no signal for whatever runs next
                return
        os.kill(os.getpid(), signal.SIGTERM)

    def unhandled(signum, frame):
        raise AssertionError("the command left SIGTERM to the caller")

    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        threading.Thread(target=terminate_after_a_checkpoint, daemon=True).start()
        assert cli.main([*TRAIN, "--data-dir", str(data_dir), "--output-dir", str(run)]) == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) == unhandled  # the command's handler is its own
    finally:
        finished.set()
        signal.signal(signal.SIGTERM, before)
    step = _checkpoint_step(run)
    assert step >= 2 and capsys.readouterr().err.splitlines()[-1] == (
        f"cse-kit: stopped by SIGTERM; nothing half-written is kept. Rerun the same command to resume {run} from its "
        f"checkpoint at step {step}.")
    assert not (run / ".checkpoint.new").exists()


def test_a_filesystem_without_flock_still_locks(tmp_path, monkeypatch):
    """Lustre mounted without `-o flock` answers ENOSYS: filelock's own lock files take over (they record the pid)."""
    import errno
    import fcntl

    from cse_kit.io import holder_lock

    def no_flock(*args):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock = holder_lock(tmp_path / ".lock")
    with pytest.warns(UserWarning, match="flock not supported on this filesystem"), lock:
        assert lock.is_locked and (tmp_path / ".lock").exists()
    assert not lock.is_locked
