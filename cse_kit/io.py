"""Files written so that nothing is ever half-written: a temporary file in the same folder, then os.replace. A
write that fails for want of room (disk full, quota, file size limit) raises WriteFailed, which names the path and
the cause, after removing what was half-written. Locks whose file says who holds them."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

#: errno of a write that failed for want of room: the disk is full, the user's quota is spent, the file is over the
#: file size limit (`ulimit -f`; Python ignores SIGXFSZ, so the write returns EFBIG)
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class WriteFailed(OSError):
    """A write failed for want of room; what was half-written is removed. str(): "cannot write PATH: CAUSE ..."."""

    def __init__(self, path, cause: str, code: int):
        super().__init__(code, cause, str(path))
        self.path, self.cause = Path(path), cause

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.cause}; nothing half-written was kept"

    @classmethod
    def said(cls, line: str) -> WriteFailed | None:
        """The WriteFailed another process said in `line` ("WriteFailed: cannot write PATH: CAUSE; nothing
        half-written was kept", its type's name qualified or not: a notebook's error, a worker job's), to be raised
        again here; None for any other line."""
        import re

        found = re.fullmatch(r"(?:[\w.]+\.)?WriteFailed: cannot write (.+): ([^:]+); nothing half-written was kept",
                             line.strip())
        if not found:
            return None
        cause = found.group(2)
        code = next((c for c in NO_ROOM if cause.startswith(os.strerror(c))), NO_ROOM[0])
        return cls(found.group(1), cause, code)


def no_room(err: BaseException, where) -> tuple[str, int] | None:
    """(cause, errno) when err is a write that failed for want of room, else None. torch and safetensors raise no
    OSError: safetensors names the cause in its message, torch's zip writer says only "unexpected pos" (the short
    write's errno is lost), so the folder's free space and the file size limit tell which it was."""
    if isinstance(err, OSError) and err.errno in NO_ROOM:
        return os.strerror(err.errno), err.errno
    text = str(err)
    for code in NO_ROOM:
        if os.strerror(code) in text:
            return os.strerror(code), code
    if not (isinstance(err, RuntimeError) and ("unexpected pos" in text or "file write failed" in text)):
        return None
    if sys.platform != "win32":
        import resource

        if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
            return f"{os.strerror(errno.EFBIG)} (over the file size limit, `ulimit -f`)", errno.EFBIG
    folder = next(p for p in (Path(where), *Path(where).parents) if p.is_dir())
    if shutil.disk_usage(folder).free < 2 ** 20:
        return os.strerror(errno.ENOSPC), errno.ENOSPC
    return "the write stopped short (a full disk or quota?)", errno.EIO


def remove(path) -> None:
    """Remove a file or folder, if there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def writing(path, partial=None):
    """The block writes `path`: when it fails (Ctrl-C included) `partial`, the half-written file or folder, is
    removed, and a failure for want of room becomes WriteFailed naming `path` (one inside the block stands)."""
    try:
        yield
    except BaseException as err:
        found = None if isinstance(err, WriteFailed) else no_room(err, path)  # before the removal frees room
        if partial is not None:
            remove(partial)
        if found is None:
            raise
        raise WriteFailed(path, *found) from None


def not_a_file(path, what: str) -> Path:
    """`path`, or a ValueError naming `what` where it (or a folder above it) is a file."""
    path = Path(path)
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ValueError(f"{what} {path} is not a folder: {blocker} is a file. Choose a folder (or remove the file)")
    return path


def ensure_dir(path, what: str) -> Path:
    """mkdir -p `path`, or a ValueError naming `what` where it (or a folder above it) is a file."""
    path = not_a_file(path, what)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_bytes_atomic(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with writing(path, partial=tmp):
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide reports and records from other users
        os.replace(tmp, path)
    return path


def write_text_atomic(path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_tensors_atomic(path, tensors: dict) -> Path:
    """A safetensors file of `tensors` (name -> CPU tensor)."""
    from safetensors.torch import save

    return write_bytes_atomic(path, save(tensors))


def write_json_atomic(path, obj) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=1) + "\n")


def swap_dir(new, path) -> Path:
    """Put folder `new` at `path`. The old one is removed only once the new one is in place, so a crash leaves the
    old or the new folder (see recover_dir), never a half-written one."""
    new, path = Path(new), Path(path)
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_abandoned(parent, prefix: str) -> list[Path]:
    """Remove the temporary folders `<parent>/<prefix><pid>-*` that a killed process left behind (its pid is no
    longer running; a name without a pid comes from an older kit and is removed too). Returns what was removed."""
    removed = []
    for path in Path(parent).glob(f"{prefix}*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and (int(pid) == os.getpid() or _alive(int(pid))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


@contextmanager
def atomic_dir(path):
    """Yields a temporary folder beside `path` that replaces `path` (swap_dir) when the block succeeds; the
    temporary folders of killed writers are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path.parent, f".{path.name}.new.")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.new.{os.getpid()}-", dir=path.parent))
    with writing(path, partial=tmp):
        yield tmp
    _share_like_umask(tmp)
    swap_dir(tmp, path)


def _share_like_umask(folder: Path) -> None:
    """mkdtemp's 0700 folder (and any 0600 file written into it) as a plain mkdir and open would have made them, so
    an exported model on a shared machine is readable by whom the user's umask allows."""
    umask = _umask()
    for root, dirs, files in os.walk(folder):
        os.chmod(root, 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


def recover_dir(path) -> Path:
    """`path`, or the previous version that an interrupted swap_dir left aside."""
    path = Path(path)
    old = path.with_name(f".{path.name}.old")
    if not path.exists() and old.exists():
        os.replace(old, path)
    return path


# --- locks that say who holds them -----------------------------------------------------------------------------

def holder_lock(path):
    """A file lock (filelock: an OS lock the kernel releases when its process dies, so a crash never leaves it held)
    whose file says who holds it, one JSON line (lock_holder), so that a stuck holder can be found. On a filesystem
    without flock (Lustre mounted without `-o flock`) filelock's own lock files, which record their holder's pid."""
    from filelock import FileLock

    return FileLock(path, on_acquired=_write_holder) if _has_flock(Path(path).parent) else FileLock(path)


def _has_flock(folder: Path) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows: filelock's native lock
        return True
    try:
        with tempfile.TemporaryFile(dir=folder) as probe:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:  # not even an empty file fits (a full disk): the lock will say so itself
        return err.errno != errno.ENOSYS
    return True


def _write_holder(fd: int) -> None:
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S %z"),
              "command": " ".join(sys.argv)}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
    except OSError:  # a full disk: the lock holds all the same, its file just does not say by whom
        pass


def lock_holder(path) -> dict | None:
    """Who holds the lock file `path` (pid, host, since, command), or None where it does not say (not held, or
    written by an older kit)."""
    try:
        holder = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and {"pid", "host", "since"} <= set(holder) else None


def describe_holder(holder: dict | None) -> str:
    if holder is None:
        return "another process (its lock file does not say which)"
    return f"pid {holder['pid']} on host {holder['host']} since {holder['since']}"


def holder_stopped(holder: dict | None) -> bool:
    """Whether the holder is a process of this machine that is alive but stopped (SIGSTOP, Ctrl-Z, a suspended
    SLURM job): it holds its lock and makes no progress until continued."""
    if holder is None or holder["host"] != socket.gethostname():
        return False
    try:  # /proc/<pid>/stat: "pid (comm) state ...", comm may hold spaces and parentheses
        state = Path(f"/proc/{int(holder['pid'])}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, ValueError):
        return False
    return state in ("T", "t")


def acquire_or_wait(lock, what: str, notify, *, stopped_after: float = 60.0, poll: float = 1.0) -> None:
    """Acquire `lock`; when another process holds it, say so through notify (naming the holder) and wait. A holder
    that stays stopped for `stopped_after` seconds is reported (how to continue or end it), instead of waiting
    without a word for as long as it stays stopped."""
    from filelock import Timeout

    try:
        lock.acquire(timeout=0)
        return
    except Timeout:
        pass
    notify(f"{what}; held by {describe_holder(lock_holder(lock.lock_file))} ({lock.lock_file})")
    stopped_since, reported = None, False
    while True:
        try:
            lock.acquire(timeout=poll)
            return
        except Timeout:
            holder = lock_holder(lock.lock_file)
        if not holder_stopped(holder):
            stopped_since, reported = None, False
            continue
        stopped_since = stopped_since or time.monotonic()
        if not reported and time.monotonic() - stopped_since >= stopped_after:
            notify(f"{lock.lock_file} is held by {describe_holder(holder)}, which is stopped (SIGSTOP, Ctrl-Z or a "
                   f"suspended job) and has not run for {time.monotonic() - stopped_since:.0f} s: continue it "
                   f"(`kill -CONT {holder['pid']}`) or end it (`kill {holder['pid']}`). Still waiting; Ctrl-C stops "
                   "waiting")
            reported = True
