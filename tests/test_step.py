"""The training step (issue 75): fixed shapes that change no number, a compiled step without graph breaks or
recompilation, and no host reads between logging steps."""

import collections
import json
import traceback

import pytest
import torch
from torch._dynamo.utils import counters

from cse_kit.eval.encode import pad_length
from cse_kit.results.identity import subject_dict
from cse_kit.results.upgrade import new_subject
from cse_kit.train import build_config, train
from cse_kit.train import loop
from cse_kit.train.data import Batches, longest_row
from cse_kit.train.step import TrainStep, compile_modules, pad_alike, resolve_padding

from test_grad_cache import _objective_and_batch, _step, assert_same_gradients


def test_auto_pads_to_one_shape_on_a_gpu_and_to_each_batchs_longest_row_on_a_cpu():
    assert resolve_padding("auto", cuda=True) == "fixed" and resolve_padding("auto", cuda=False) == "longest"
    assert resolve_padding("buckets", cuda=True) == "buckets"
    assert [pad_length(n, "buckets", 40) for n in (5, 8, 9, 17, 33)] == [8, 8, 16, 32, 40]
    assert [pad_length(n, "fixed", 40) for n in (5, 40)] == [40, 40] and pad_length(5, "longest", 40) == 5


def test_a_captured_step_without_fixed_shapes_is_refused_in_one_line():
    with pytest.raises(ValueError, match="set pad_to=fixed"):
        build_config("simcse-bert", "smoke", {"compile": "reduce-overhead", "pad_to": "longest"})
    assert build_config("simcse-bert", "smoke", {"compile": "reduce-overhead"}).pad_to == "auto"


def test_a_runs_key_holds_the_padding_it_trains_with_and_a_record_from_before_keeps_its_key():
    cfg = build_config("simcse-bert", "smoke")
    assert subject_dict(cfg, cuda=False)["pad_to"] == "longest" and subject_dict(cfg, cuda=True)["pad_to"] == "fixed"
    before = {k: v for k, v in subject_dict(cfg, cuda=False).items() if k not in ("pad_to", "deterministic")}
    record = {"subject": before, "config": cfg.to_dict()}
    assert new_subject(record, cfg.to_dict()) == subject_dict(cfg, cuda=False)


def test_every_batch_is_padded_to_the_datas_longest_row(data_dir, tmp_path):
    _, batches, _ = loop._training_data(build_config("simcse-bert", "smoke", {"data_dir": str(data_dir),
                                                                             "pad_to": "fixed"}),
                                        *_tokenizer_and_accelerator())
    widths = {batches(i)["input_ids"].shape[-1] for i in range(batches.steps_per_epoch)}
    longest = max(len(ids) for ids in batches.dataset["ids0"])
    assert widths == {longest} == {batches.fixed_length}


def _tokenizer_and_accelerator():
    cfg = build_config("simcse-bert", "smoke")
    return loop.load_encoder(cfg.model)[0], loop._accelerator(cfg)


def _objective_and_padded_batch(preset, data_dir, tmp_path, padding: str):
    """The preset's objective (test_grad_cache's: dropout off, weights that separate sentences) and its first batch
    padded as `padding` says, the method told how the run pads (as the step tells it) and its host draws made."""
    objective, _ = _objective_and_batch(preset, data_dir, tmp_path)
    cfg = build_config(preset, "smoke", {"data_dir": str(data_dir), "pad_to": padding, "max_seq_length": 128})
    _, batches, _ = loop._training_data(cfg, loop.load_encoder(cfg.model)[0], loop._accelerator(cfg))
    pad_alike(objective, batches)
    shorter = next(i for i in range(batches.steps_per_epoch)  # a batch whose rows are all shorter than the longest
                   if Batches.__call__(batches, i)["attention_mask"].sum(-1).max() < longest_row(
                       batches.dataset, batches.columns))
    torch.manual_seed(2)
    return objective, objective.host_inputs(batches(shorter))


@pytest.mark.parametrize("preset", ["simcse-bert", "esimcse-bert", "promptbert-bert", "scd-bert"])
def test_fixed_padding_gives_the_longest_paddings_loss_and_gradients(preset, data_dir, tmp_path):
    """Masked positions contribute nothing: one step on the same rows padded to their longest row and to the data's
    longest row has the same loss and gradients (dropout off: its masks are drawn over the padded shape)."""
    steps = {}
    for padding in ("longest", "fixed"):
        objective, batch = _objective_and_padded_batch(preset, data_dir, tmp_path, padding)
        steps[padding] = _step(objective, batch, None), batch["input_ids"].shape[-1]
    (longest, width), (fixed, fixed_width) = steps["longest"], steps["fixed"]
    assert fixed_width > width  # the test pads for real
    assert float(fixed[0]["loss"]) == pytest.approx(float(longest[0]["loss"]), rel=1e-5)
    assert_same_gradients(fixed[1], longest[1], rtol=1e-4)


def _eager_compile_counting(monkeypatch):
    """Module.compile with dynamo's eager backend and fullgraph=True (a graph break is an error): what dynamo traces,
    without inductor's code generation; the graphs it makes are counted in torch._dynamo's counters."""
    import torch._dynamo

    torch._dynamo.reset()
    counters.clear()
    compile_module = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile",
                        lambda self, **kwargs: compile_module(self, backend="eager", fullgraph=True))


def _graphs_after_each_step(monkeypatch) -> list:
    graphs = []
    step = loop._Training.optimizer_step

    def counted(self):
        stage = step(self)
        graphs.append((stage, counters["stats"]["unique_graphs"]))
        return stage

    monkeypatch.setattr(loop._Training, "optimizer_step", counted)
    return graphs


#: the methods whose step traces with one shape; PromptBERT's denoising rows and DiffAug's stage 2 vary in number,
#: so dynamo recompiles once for them, with that size dynamic (automatic dynamic shapes), in each stage's second step
ONE_SHAPE = ("simcse-bert", "diffcse-bert-sts")


@pytest.mark.parametrize("preset", [*ONE_SHAPE, *(pytest.param(p, marks=pytest.mark.slow) for p in (
    "scd-bert", "esimcse-bert", "consert-bert", "promptbert-bert", "diffaug-semi-aux-bert"))])
def test_a_compiled_step_at_fixed_shapes_has_no_graph_break_and_no_recompilation(preset, data_dir, tmp_path,
                                                                                  monkeypatch):
    _eager_compile_counting(monkeypatch)
    graphs = _graphs_after_each_step(monkeypatch)
    cfg = build_config(preset, "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                         "max_steps": 20, "max_examples": 400, "pad_to": "fixed", "compile": True})
    summary = train(cfg, progress=False)  # fullgraph=True: a graph break would raise
    assert summary["steps"] == len(graphs) and not counters["graph_break"]
    for stage in {s for s, _ in graphs}:
        counts = [n for s, n in graphs if s == stage]
        warm = 1 if preset in ONE_SHAPE else 2
        assert len(set(counts[warm - 1:])) == 1, f"stage {stage} compiled again after step {warm}: {counts}"
    assert counts[0] >= 1  # it compiled


#: what reads a tensor's value on the host (a GPU step waits for the device there)
HOST_READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")


def _where(filename: str) -> str:
    """A file as the package path it is (cse_kit/..., or what follows site-packages/), wherever the checkout is."""
    return filename[filename.rfind("cse_kit/"):] if "cse_kit/" in filename else filename.split("site-packages/")[-1]


def _count_host_reads(monkeypatch, where: str, outside: str | None = None) -> collections.Counter:
    """Calls of HOST_READS made from files under `where` ("cse_kit/": the loop and the methods; "": anyone, the
    model's code too), but `outside`, while counting is on (counted["on"])."""
    calls = collections.Counter()
    on = {"on": False}

    def counting(name):
        read = getattr(torch.Tensor, name)

        def counted(self, *args, **kwargs):
            if on["on"]:
                frame = traceback.extract_stack(limit=2)[0]
                if where in frame.filename and not (outside and outside in frame.filename):
                    calls[f"{_where(frame.filename)}:{frame.name} {name}"] += 1
            return read(self, *args, **kwargs)
        return counted

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    return calls, on


def _between_logging_steps(monkeypatch, on: dict, first: int, last: int) -> None:
    """Counting on from the start of step `first` (numbered from 1) to the start of step `last`, off while a step's
    host part makes its batch (the data, a method's host draws: no device value is read there)."""
    optimizer_step, host_batch = loop._Training.optimizer_step, TrainStep.host_batch

    def step(self):
        on["on"] = first <= self.state["step"] + 1 < last
        return optimizer_step(self)

    def host(self, *args):
        was, on["on"] = on["on"], False
        try:
            return host_batch(self, *args)
        finally:
            on["on"] = was

    monkeypatch.setattr(loop._Training, "optimizer_step", step)
    monkeypatch.setattr(TrainStep, "host_batch", host)


#: DiffAug's template denoising runs one row per sentence length present, as the official code (models.py:281-284):
#: it reads the longest length, once a step (a GPU waits for it there; the rows' number is the batch's to decide)
DENOISING_READS = {"diffaug-semi-aux-bert": {"cse_kit/methods/diffaug.py:denoised __int__": 3}}


@pytest.mark.parametrize("preset", ["simcse-bert", "diffcse-bert-sts", "scd-bert", "esimcse-bert",
                                    "promptbert-bert", "consert-bert", "diffaug-semi-aux-bert"])
def test_the_loop_reads_nothing_from_the_device_between_two_logging_steps(preset, data_dir, tmp_path, monkeypatch):
    """Steps 5-7 run between the logging steps 4 and 8 (log_steps 4; 8 evaluates too): the loop and the method read
    no tensor's value there (transformers' eager attention asks whether a mask masks anything: a compiled step traces
    that away)."""
    calls, on = _count_host_reads(monkeypatch, "cse_kit/")
    _between_logging_steps(monkeypatch, on, 5, 8)
    cfg = build_config(preset, "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                         "max_steps": 8, "log_steps": 4, "eval_steps": 8})
    train(cfg, progress=False)
    assert calls == collections.Counter(DENOISING_READS.get(preset, {}))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    logged = {r["step"] for r in log if "loss" in r}
    assert {4, 8} <= logged and not {5, 6, 7} & logged


def test_a_step_that_logs_and_evaluates_reads_the_device_once(data_dir, tmp_path, monkeypatch):
    """Steps 4 and 8 each log their losses and show them beside the dev score: one transfer each, not two."""
    reads, read = [], TrainStep._read

    def counted(self):
        reads.append(self)
        return read(self)

    monkeypatch.setattr(TrainStep, "_read", counted)
    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                                "max_steps": 8, "log_steps": 4, "eval_steps": 4})
    train(cfg, progress=True)
    assert len(reads) == 2


def test_a_compiled_step_reads_nothing_from_the_device_between_two_logging_steps(data_dir, tmp_path, monkeypatch):
    """Compiled, the model's own mask check is traced away too: no read by anyone (but torch's unfused AdamW, which
    counts a CPU run's steps in host tensors; a GPU run's fused AdamW keeps them on the device)."""
    _eager_compile_counting(monkeypatch)
    calls, on = _count_host_reads(monkeypatch, "", outside="torch/optim/")
    _between_logging_steps(monkeypatch, on, 5, 8)
    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                                "max_steps": 8, "log_steps": 4, "eval_steps": 8, "pad_to": "fixed",
                                                "compile": True})
    train(cfg, progress=False)
    assert not calls


@pytest.mark.parametrize("preset", ["diffcse-bert-sts", "esimcse-bert"])
def test_a_compiled_step_computes_what_the_eager_step_does(preset, data_dir, tmp_path, monkeypatch):
    """The modules a method compiles (DiffCSE's discriminator with its conditioning hook, ESimCSE's momentum encoder
    beside the encoder) traced whole: the same loss and gradients as eager, from the same random state."""
    objective, batch = _objective_and_padded_batch(preset, data_dir, tmp_path, "fixed")
    state = {k: v.clone() for k, v in objective.state_dict().items()}
    eager = _step(objective, batch, None)
    objective.load_state_dict(state)  # ESimCSE's queue and momentum encoder moved
    _eager_compile_counting(monkeypatch)
    compile_modules(objective, True)
    compiled = _step(objective, batch, None)
    assert counters["stats"]["unique_graphs"] == len(objective.compiled_modules()) and not counters["graph_break"]
    assert float(compiled[0]["loss"]) == pytest.approx(float(eager[0]["loss"]), rel=1e-6)
    assert_same_gradients(compiled[1], eager[1], rtol=1e-5)


def test_a_cached_step_at_fixed_shapes_compiles_once_for_its_chunks(data_dir, tmp_path, monkeypatch):
    """Gradient caching on fixed shapes: every chunk has the compiled encoder's one shape (4 divides the 16 rows), so
    its passes with and without a graph reuse what was compiled, and it equals the plain step."""
    objective, batch = _objective_and_padded_batch("simcse-bert", data_dir, tmp_path, "fixed")
    plain = _step(objective, batch, None)
    _eager_compile_counting(monkeypatch)
    objective.encoder.compile()
    cached = _step(objective, batch, 4)
    graphs = counters["stats"]["unique_graphs"]
    _step(objective, batch, 4)
    assert counters["stats"]["unique_graphs"] == graphs and not counters["graph_break"]
    assert float(cached[0]["loss"]) == pytest.approx(float(plain[0]["loss"]), rel=1e-5)
    assert_same_gradients(cached[1], plain[1])
