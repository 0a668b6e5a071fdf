"""Files written so that nothing is ever half-written: a temporary file in the same folder, then os.replace."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_bytes_atomic(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide reports and records from other users
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
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
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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
