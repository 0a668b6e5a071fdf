"""Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"):
the full batch's loss and gradients computed in memory-sized chunks of rows, so a contrastive loss keeps the papers'
negatives on a small device.

A method that can be cached splits its step in three (hooks of cse_kit.methods.Objective):
- `cache_inputs(batch)`: every random draw that is not the encoder's own dropout, made once for the whole batch
  (DiffCSE's masks and generator, ESimCSE's repetitions, ConSERT's cut-offs), as {stream: the rows' inputs}: the
  main batch, and for an auxiliary loss the NLI triplets, each cut into chunks on its own; "shared": what only the
  loss reads (DiffCSE's edited sentences);
- `cache_encode(stream, inputs)`: the expensive per-row part (the encoder) on one chunk's rows, (rows, ...);
- `cache_loss(inputs, reps, backward, chunk)`: the whole-batch part on every row's representation (projector,
  BatchNorm, InfoNCE, queue): (what to backpropagate, the step's outputs). A per-sentence term as heavy as the encoder
  (DiffCSE's discriminator) runs there chunk by chunk, each chunk backpropagated at once with `backward`.

`cached_step` runs the encoder on every chunk without a graph (saving the random state before each), the loss on the
whole batch with a graph from the representations, its backward (the representations' gradients: the cache), then
each chunk again with a graph, the random state restored (the same dropout masks), backpropagating the cached
gradients into the weights. Gradients are those of the whole-batch step; only one chunk's activations are held."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator

import torch


def _first_tensor(inputs) -> torch.Tensor:
    """The first tensor in a stream's inputs (in dicts, lists, tuples, dataclasses): its rows are the stream's."""
    if isinstance(inputs, torch.Tensor):
        return inputs
    if dataclasses.is_dataclass(inputs):
        values = [getattr(inputs, f.name) for f in dataclasses.fields(inputs)]
    else:
        values = list(inputs.values()) if isinstance(inputs, dict) else list(inputs) \
            if isinstance(inputs, (list, tuple)) else []
    for value in values:
        with contextlib.suppress(ValueError):
            return _first_tensor(value)
    raise ValueError("a cached stream's inputs hold no tensor")


def take(inputs, rows: slice):
    """`inputs` restricted to `rows`: every tensor in it (in dicts, lists, tuples, dataclasses) sliced on its first
    dimension; anything else as it is."""
    if isinstance(inputs, torch.Tensor):
        return inputs[rows]
    if dataclasses.is_dataclass(inputs) and not isinstance(inputs, type):
        return dataclasses.replace(inputs, **{f.name: take(getattr(inputs, f.name), rows)
                                              for f in dataclasses.fields(inputs)})
    if isinstance(inputs, dict):
        return {k: take(v, rows) for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(take(v, rows) for v in inputs)
    return inputs


def chunks(rows: int, size: int) -> Iterator[slice]:
    """Consecutive slices of at most `size` rows covering `rows` (the last one shorter where size does not divide)."""
    return (slice(start, min(start + size, rows)) for start in range(0, rows, size))


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def streams(inputs: dict) -> dict:
    """The streams of `cache_inputs`' answer: every entry but "shared" (whole-batch inputs of the loss alone)."""
    return {k: v for k, v in inputs.items() if k != "shared"}


def backward_with(scale: Callable[[torch.Tensor], torch.Tensor] | None, weight: float = 1.0):
    """The backward of one part of the step: `weight` (1 / the micro-batches of an accumulated step) times the part,
    through the fp16 GradScaler's `scale` where there is one, outside autocast. Every part is scaled once: the
    representations' cached gradients then carry the scale, and the re-forward backpropagates them as they are."""
    def backward(part: torch.Tensor) -> None:
        part = part * weight if weight != 1 else part
        with torch.autocast(part.device.type, enabled=False):
            (scale(part) if scale is not None else part).backward()
    return backward


def refusal(objective) -> str | None:
    """Why `objective` (an Objective) cannot take a cached step, in one line with the fix, or None."""
    reason = objective.cache_refusal()
    return f"grad_cache: {reason}; train it with grad_cache=0" if reason else None


def cached_step(objective, batch: dict, chunk: int, backward: Callable[[torch.Tensor], None],
                autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> dict:
    """One step's gradients of `objective` on `batch`, `chunk` rows of each stream at a time (module docstring),
    accumulated into the parameters' .grad. Returns the step's outputs (its "loss" detached)."""
    if chunk < 1:
        raise ValueError(f"grad_cache needs chunks of at least 1 row, got {chunk}")
    with autocast():
        inputs = objective.cache_inputs(batch)
    device = _first_tensor(streams(inputs)).device
    pieces = {stream: list(chunks(len(_first_tensor(rows)), chunk)) for stream, rows in streams(inputs).items()}
    states, reps = {}, {}
    with torch.no_grad(), autocast():
        for stream, rows in streams(inputs).items():
            parts, states[stream] = [], []
            for piece in pieces[stream]:
                states[stream].append(_rng_state(device))
                parts.append(objective.cache_encode(stream, take(rows, piece)))
            reps[stream] = torch.cat(parts).detach().requires_grad_()
    with autocast():
        loss, out = objective.cache_loss(inputs, reps, backward, chunk)
    if loss.requires_grad:  # DiffCSE without its contrastive term backpropagated all of it chunk by chunk
        backward(loss)
    after = _rng_state(device)
    for stream, rows in streams(inputs).items():
        grad = reps[stream].grad
        if grad is None:  # the loss did not read this stream
            continue
        for piece, state in zip(pieces[stream], states[stream]):
            _set_rng_state(state, device)
            with autocast():
                again = objective.cache_encode(stream, take(rows, piece))
            with torch.autocast(again.device.type, enabled=False):
                again.backward(grad[piece].to(again.dtype))  # the cached gradient already carries the scale
    _set_rng_state(after, device)  # the draws go on as after one pass, not replayed twice
    return {**out, "loss": out["loss"].detach()}


def average_gradients(parameters) -> None:
    """DDP's average of the processes' gradients, for a cached step that ran outside DDP's forward (its hooks only
    reduce after that forward): the same update as the uncached step on every process."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    world = torch.distributed.get_world_size()
    if world == 1:
        return
    for p in parameters:
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad)
            p.grad.div_(world)
