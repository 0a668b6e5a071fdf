"""What a run's checkpoint costs: the kit's pickle-free checkpoint (cse_kit.train.checkpoint: safetensors, JSON and
every file's SHA-256, checked before a resume reads it) against Accelerate's save_state/load_state (what cse-kit
0.1.0 wrote), for a BERT-base encoder (BertConfig() with random weights, no download) after one AdamW step.

  python bench/checkpoint_cost.py [--repeats 3] [--dir /tmp]

Prints the bytes on disk and the median seconds to save and to restore, alternating the two formats so machine
noise hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def _model_and_optimizer(accelerator):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model(torch.randint(0, 1000, (2, 16))).last_hidden_state.sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    return model, optimizer, scheduler


def _kit(folder: Path, model, optimizer, scheduler) -> tuple[float, float]:
    from cse_kit.io import write_json_atomic
    from cse_kit.train.checkpoint import STATE, read_checkpoint, trainer_state, write_process_files

    t = time.perf_counter()
    write_process_files(folder, 0, model, [optimizer], main=True)
    write_json_atomic(folder / STATE, trainer_state(folder, {"step": 1}, [scheduler], None, 1))
    saved = time.perf_counter() - t
    t = time.perf_counter()
    read_checkpoint(folder, 0, 1, model, [optimizer], [scheduler], None, "restart")
    return saved, time.perf_counter() - t


def _accelerate(folder: Path, accelerator) -> tuple[float, float]:
    t = time.perf_counter()
    accelerator.save_state(str(folder))
    saved = time.perf_counter() - t
    t = time.perf_counter()
    accelerator.load_state(str(folder))
    return saved, time.perf_counter() - t


def main() -> None:
    from accelerate import Accelerator

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the checkpoints are written (default: the temp folder)")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler = _model_and_optimizer(accelerator)
    times: dict[str, list[tuple[float, float]]] = {"kit": [], "accelerate": []}
    sizes = {}
    for _ in range(args.repeats):
        for name in times:
            with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                folder = Path(tmp) / "checkpoint"
                times[name].append(_kit(folder, model, optimizer, scheduler) if name == "kit"
                                   else _accelerate(folder, accelerator))
                sizes[name] = sum(p.stat().st_size for p in folder.iterdir())
    for name, pairs in times.items():
        save, load = (statistics.median(x) for x in zip(*pairs))
        print(f"{name:10s} {sizes[name] / 1e6:8.1f} MB   save {save:6.2f} s   restore {load:6.2f} s   "
              f"(median of {args.repeats})")


if __name__ == "__main__":
    main()
