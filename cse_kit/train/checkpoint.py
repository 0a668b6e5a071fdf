"""A run's checkpoint, written and read by the kit without pickle: a run folder is data, never code.

`checkpoint/` holds the model (`model.safetensors`), each optimizer's tensors (`optimizer.safetensors`,
`optimizer_1.safetensors`; their other values as JSON in the file's metadata), each process's random states
(`random_states_<rank>.json`: Python's, NumPy's and torch's, the last as hex bytes) and `trainer_state.json`: the
loop's state, the schedulers' and the AMP scaler's states, the number of processes, every other file's SHA-256 and
its own. A resume checks every digest before it reads a byte of a file, so a damaged or replaced file is refused in
one line naming it, never half-restored.

Checkpoints of earlier versions (Accelerate's save_state: `custom_checkpoint_*.pkl`, `random_states_*.pkl`,
`optimizer.bin`, up to commit c4c4f67) are refused: Accelerate reads the first with pickle's full power."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import torch

from ..io import recover_dir

FORMAT = 2
#: The run folder's checkpoint of its last saved step (what a stopped run resumes from).
CHECKPOINT = "checkpoint"
STATE = "trainer_state.json"
MODEL = "model.safetensors"
#: what earlier versions (Accelerate's save_state) wrote, any one of which marks their checkpoints
ACCELERATE_FILES = ("custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin")


class RunStateError(ValueError):
    """A run folder's files cannot be resumed from; the message names the file and the fix."""


def optimizer_file(index: int) -> str:
    return "optimizer.safetensors" if index == 0 else f"optimizer_{index}.safetensors"


def random_states_file(rank: int) -> str:
    return f"random_states_{rank}.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:  # by blocks, as hashlib.file_digest (Python 3.11; the kit runs on 3.10)
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sealed(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# --- writing --------------------------------------------------------------------------------------------------------

def write_process_files(folder: Path, rank: int, model, optimizers: list, *, main: bool) -> None:
    """What one process writes into the new checkpoint folder: its random states; the main process also the model
    and the optimizers (the same on every process)."""
    from safetensors.torch import save_file, save_model

    folder.mkdir(parents=True, exist_ok=True)
    (folder / random_states_file(rank)).write_text(json.dumps(_random_states()))
    if not main:
        return
    save_model(model, str(folder / MODEL), force_contiguous=True)  # tied weights (DiffCSE's generator) once
    for i, optimizer in enumerate(optimizers):
        tensors, metadata = _optimizer_parts(optimizer.state_dict())
        save_file(tensors, str(folder / optimizer_file(i)), metadata=metadata)


def trainer_state(folder: Path, state: dict, schedulers: list, scaler, processes: int) -> dict:
    """trainer_state.json's content, once every process wrote its files into `folder`: `state`, what restores the
    rest, every file's digest, and its own."""
    files = {p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.name != STATE}
    body = {**state, "checkpoint": {"format": FORMAT, "processes": processes, "files": files,
                                    "schedulers": [s.state_dict() for s in schedulers],
                                    "scaler": scaler.state_dict() if scaler is not None else None}}
    return {**body, "sha256": _sealed(body)}


def _random_states() -> dict:
    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [kind, keys.tolist(), position, has_gauss, cached],
            "torch": torch.get_rng_state().numpy().tobytes().hex(),
            "cuda": [s.numpy().tobytes().hex() for s in torch.cuda.get_rng_state_all()]
            if torch.cuda.is_available() else []}


def _optimizer_parts(state: dict) -> tuple[dict, dict]:
    """An optimizer's state_dict as safetensors tensors ("<param>.<name>") and JSON metadata (its param groups and
    any value that is not a tensor)."""
    tensors, values = {}, {}
    for index, entries in state["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                values[f"{index}.{name}"] = value
    return tensors, {"param_groups": json.dumps(state["param_groups"]), "values": json.dumps(values)}


# --- reading --------------------------------------------------------------------------------------------------------

def read_checkpoint(folder: Path, rank: int, processes: int, model, optimizers: list, schedulers: list, scaler,
                    fix: str) -> dict:
    """Restore everything the checkpoint in `folder` saved for process `rank` and return the loop's state, or raise
    RunStateError naming the file that cannot be restored and `fix`."""
    from safetensors.torch import load_model

    saved = _read_state(folder, fix)
    meta = saved.pop("checkpoint")
    if meta["processes"] != processes:
        raise RunStateError(f"{folder} was written by a run of {meta['processes']} processes and this one has "
                              f"{processes}: each process's random states are in it, so resume with "
                              f"{meta['processes']} processes, or {fix}")
    files = meta["files"]
    with _restoring(folder / MODEL, files, fix) as path:
        load_model(model, str(path), strict=True)
    for i, optimizer in enumerate(optimizers):
        with _restoring(folder / optimizer_file(i), files, fix) as path:
            optimizer.load_state_dict(_optimizer_state(path, optimizer.state_dict()))
    with _restoring(folder / STATE, None, fix):
        for scheduler, state in zip(schedulers, meta["schedulers"], strict=True):
            scheduler.load_state_dict(state)
        if scaler is not None:
            scaler.load_state_dict(meta["scaler"])
    with _restoring(folder / random_states_file(rank), files, fix) as path:
        _set_random_states(json.loads(path.read_text()))
    return saved


def _read_state(folder: Path, fix: str) -> dict:
    path = folder / STATE
    try:
        saved = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunStateError(f"{path} is damaged ({e}); {fix}") from None
    if not isinstance(saved, dict):
        raise RunStateError(f"{path} is damaged (a JSON {type(saved).__name__}, not the trainer's state); {fix}")
    if "checkpoint" not in saved and any((folder / name).exists() for name in ACCELERATE_FILES):
        raise RunStateError(
            f"{folder} is in the checkpoint format of earlier cse-kit versions (Accelerate's save_state), whose "
            "pickles can run code when read, so this version does not read it. Finish the run with the cse-kit that "
            f"started it (e.g. `git checkout c4c4f67`), or {fix}")
    body = {k: v for k, v in saved.items() if k != "sha256"}
    if saved.get("sha256") != _sealed(body) or not isinstance(saved.get("checkpoint"), dict):
        raise RunStateError(f"{path} is damaged (its content does not match its SHA-256: edited or replaced); {fix}")
    return body


class _restoring:
    """The block restores `path`: the file must have the digest `files` recorded (before anything reads it), and
    any error in the block names the file."""

    def __init__(self, path: Path, files: dict | None, fix: str):
        self.path, self.files, self.fix = path, files, fix

    def __enter__(self) -> Path:
        if self.files is None:
            return self.path
        expected = self.files.get(self.path.name)
        if expected is None or not self.path.is_file():
            raise RunStateError(f"{self.path} is missing from the checkpoint; {self.fix}")
        if _sha256(self.path) != expected:
            raise RunStateError(f"{self.path} is damaged (its SHA-256 is not the one the checkpoint recorded: "
                                  f"truncated, edited or replaced); {self.fix}")
        return self.path

    def __exit__(self, kind, error, _):
        if error is not None and not isinstance(error, RunStateError) and isinstance(error, Exception):
            raise RunStateError(f"{self.path} cannot be restored ({kind.__name__}: {error}); {self.fix}") from None
        return False


def _optimizer_state(path: Path, live: dict) -> dict:
    """The state_dict _optimizer_parts saved, with the tuples (Adam's betas) JSON made lists turned back."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        state: dict = {}
        for key in f.keys():
            index, name = key.split(".", 1)
            state.setdefault(int(index), {})[name] = f.get_tensor(key)
    for key, value in json.loads(metadata["values"]).items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    groups = [{k: tuple(v) if isinstance(now.get(k), tuple) else v for k, v in group.items()}
              for group, now in zip(json.loads(metadata["param_groups"]), live["param_groups"], strict=True)]
    return {"state": state, "param_groups": groups}


def _set_random_states(states: dict) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(torch.tensor(bytearray.fromhex(states["torch"]), dtype=torch.uint8))
    if states["cuda"] and torch.cuda.is_available():  # a GPU run resumed on a CPU draws other numbers anyway
        for device, state in enumerate(states["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(torch.tensor(bytearray.fromhex(state), dtype=torch.uint8), device)


def checkpoint_step(checkpoint: Path) -> int | None:
    """The step the checkpoint folder holds, or None where it holds none."""
    path = checkpoint / STATE
    return json.loads(path.read_text())["step"] if path.is_file() else None


def resume_words(run: Path) -> str:
    """What training run folder `run` again does after a stop: resume from its checkpoint's step (a checkpoint
    stopped in the middle of its swap recovered first), or train from step 0."""
    step = checkpoint_step(recover_dir(Path(run) / CHECKPOINT))
    return (f"resume {run} from its checkpoint at step {step}" if step is not None else
            f"train {run} (it stopped before its first checkpoint: from step 0)")
