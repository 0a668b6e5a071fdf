"""The training step (issue 75): fixed shapes that change no number, a compiled step without graph breaks or
recompilation, and no host reads between logging steps."""

import collections
import dataclasses
import json
import sys
import tempfile
from unittest import mock

import pytest
import torch
from torch._dynamo.utils import counters
from torch.overrides import TorchFunctionMode

from cse_kit.data.registry import ORDERED_CORPORA, is_nli
from cse_kit.eval.encode import pad_length
from cse_kit.methods.registry import method_class
from cse_kit.models import load_encoder
from cse_kit.results.identity import subject_dict
from cse_kit.results.upgrade import new_subject
from cse_kit.train import build_config, train
from cse_kit.train import loop
from cse_kit.train.config import CAPTURED, COMPILE_MODES
from cse_kit.train.data import Batches, longest_row
from cse_kit.train.setup import run_accelerator, training_data
from cse_kit.train.step import (COMPILED_GRAPHS, TrainStep, compile_line, compile_modules, graphs_table, pad_alike,
                                 padding_line, resolve_padding)

from conftest import REPO
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


def _widths(padding: str, data_dir) -> tuple[list, Batches]:
    """The width of every batch of an epoch of the smoke preset's data padded as `padding` says, rows up to 128
    tokens long (at the smoke preset's 32 every batch holds a 32-token row, and every padding gives 32)."""
    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir), "pad_to": padding, "max_seq_length": 128})
    _, batches, _ = training_data(cfg, *_tokenizer_and_accelerator())
    return [batches(i)["input_ids"].shape[-1] for i in range(batches.steps_per_epoch)], batches


def test_every_batch_is_padded_to_the_datas_longest_row(data_dir):
    """The same data's batches differ in length (each padded to its longest row: several widths), and `fixed` pads
    every one of them to the data's longest row (one width)."""
    longest, _ = _widths("longest", data_dir)
    fixed, batches = _widths("fixed", data_dir)
    data_longest = max(len(ids) for ids in batches.dataset["ids0"])
    assert len(set(longest)) > 1 and max(longest) == data_longest  # the batches differ: the test pads for real
    assert set(fixed) == {data_longest} == {batches.fixed_length}


def _tokenizer_and_accelerator():
    cfg = build_config("simcse-bert", "smoke")
    return load_encoder(cfg.model)[0], run_accelerator(cfg)


def _objective_and_padded_batch(preset, data_dir, tmp_path, padding: str):
    """The preset's objective (test_grad_cache's: dropout off, weights that separate sentences) and its first batch
    padded as `padding` says, the method told how the run pads (as the step tells it) and its host draws made."""
    objective, _ = _objective_and_batch(preset, data_dir, tmp_path)
    cfg = build_config(preset, "smoke", {"data_dir": str(data_dir), "pad_to": padding, "max_seq_length": 128})
    _, batches, _ = training_data(cfg, load_encoder(cfg.model)[0], run_accelerator(cfg))
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


def _assert_graphs_as_the_table_says(preset: str, graphs: list) -> None:
    """Each stage's graphs after its first step and after each later step, exactly (COMPILED_GRAPHS)."""
    assert {s for s, _ in graphs} == set(COMPILED_GRAPHS[preset])
    for stage, (first, later) in COMPILED_GRAPHS[preset].items():
        counts = [n for s, n in graphs if s == stage]
        assert counts == [first] + [later] * (len(counts) - 1), f"stage {stage}: {counts}"


#: the presets the default suite compiles (SimCSE; DiffCSE's discriminator; ESimCSE's momentum encoder, and its x+,
#: whose padding follows the run's); the others are slow
QUICK_GRAPHS = ("simcse-bert", "diffcse-bert-sts", "esimcse-bert")


@pytest.mark.parametrize("preset", [p if p in QUICK_GRAPHS else pytest.param(p, marks=pytest.mark.slow)
                                    for p in COMPILED_GRAPHS])
def test_a_compiled_step_at_fixed_shapes_makes_the_graphs_the_table_says(preset, data_dir, tmp_path, monkeypatch):
    """dynamo traces each method's step with fullgraph=True (a graph break raises) at fixed shapes, and holds the
    graphs COMPILED_GRAPHS says after each stage's first step and after every later one: none more (an input padded
    to its batch's own length, ESimCSE's x+ say, compiles again in the second step)."""
    _eager_compile_counting(monkeypatch)
    graphs = _graphs_after_each_step(monkeypatch)
    cfg = build_config(preset, "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                         "max_steps": 4, "max_examples": 400, "pad_to": "fixed", "compile": True})
    summary = train(cfg, progress=False)
    assert summary["steps"] == len(graphs) and not counters["graph_break"]
    _assert_graphs_as_the_table_says(preset, graphs)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [True, *COMPILE_MODES])
def test_every_compile_mode_compiles_the_step_and_says_what_runs_on_a_cpu(mode, data_dir, tmp_path, monkeypatch,
                                                                          capsys):
    """Each mode the kit offers, compiled by inductor (C++ for the CPU) for SimCSE's step: the graphs the table
    says, no graph break. On a CPU torch captures nothing: reduce-overhead and max-autotune ask inductor for CUDA
    graphs, and its cudagraph trees skip every graph that is not on a CUDA device (`skipping cudagraphs due to cpu
    device`, counted in counters["inductor"]["cudagraph_skips"]), so reduce-overhead runs inductor's default code
    and max-autotune its autotuned code (as max-autotune-no-cudagraphs); the run says so in one line. 63 s for the
    four on the 2-core AMD EPYC (AVX2 only) with inductor's on-disk cache warm; about a minute a mode cold."""
    import torch._dynamo

    torch._dynamo.reset()
    counters.clear()
    graphs = _graphs_after_each_step(monkeypatch)
    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                                "max_steps": 3, "max_examples": 400, "pad_to": "fixed",
                                                "compile": mode})
    train(cfg, progress=False)
    assert not counters["graph_break"]
    _assert_graphs_as_the_table_says("simcse-bert", graphs)
    assert bool(counters["inductor"]["cudagraph_skips"]) == (mode in CAPTURED)
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"compile={mode} ")]
    assert said == ([compile_line(mode, "cpu")] if mode in CAPTURED else [])


def test_a_run_names_its_padding_and_what_a_cuda_graph_mode_runs_on_a_cpu(data_dir, tmp_path, capsys):
    assert padding_line("auto", "longest", None) == ("padding: pad_to=auto on this machine: pad_to=longest, each "
                                                     "batch to its longest row")
    assert compile_line("reduce-overhead", "cpu") == ("compile=reduce-overhead captures the step in CUDA graphs, "
                                                      "which need CUDA: on this cpu the step runs as compile=true "
                                                      "(inductor's default mode), nothing captured")
    assert "max-autotune-no-cudagraphs" in compile_line("max-autotune", "cpu")
    assert compile_line("reduce-overhead", "cuda") is None and compile_line(True, "cpu") is None
    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                                "max_steps": 1, "max_examples": 64, "pad_to": "fixed"})
    train(cfg, progress=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("padding: pad_to=fixed, every batch to the training data's longest row (")


def test_the_docs_show_the_graph_table():
    assert graphs_table() in (REPO / "docs" / "training.md").read_text()


#: what reads a tensor's value on the host (a GPU step waits for the device there): `.item()`, `.tolist()`,
#: `.numpy()`, `float()`, `int()`, `bool()` of a tensor (`if tensor:` too) and a tensor as an index
#: (`operator.index`); `.cpu()` and a `.to()` that moves a tensor to the CPU are counted by _moves_to_the_host
HOST_READS = {"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"}


def _moves_to_the_host(name: str, args: tuple, kwargs: dict) -> bool:
    """`.cpu()`, or `.to()` to the CPU (by name or torch.device, positional or `device=`) without non_blocking: a
    copy the host waits for. On a CPU every tensor is on the CPU already, so what a GPU would copy back counts; a
    non-blocking `.to()` is the step's copy of its batch to the device (the host's own tensors, pinned)."""
    if name == "cpu":
        return True
    if name != "to" or kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True):
        return False
    targets = [*args[1:2], kwargs.get("device")]
    return any(isinstance(t, (str, torch.device)) and torch.device(t).type == "cpu" for t in targets)


def _where(filename: str) -> str:
    """A file as the package path it is (cse_kit/..., or what follows site-packages/), wherever the checkout is."""
    return filename[filename.rfind("cse_kit/"):] if "cse_kit/" in filename else filename.split("site-packages/")[-1]


class HostReads(TorchFunctionMode):
    """Every host read (HOST_READS, _moves_to_the_host) made while `on`, by the code that makes it (the file and
    function calling the tensor's method), from files under `where` ("cse_kit/": the loop and the methods; "":
    anyone, the model's code too) but `outside`. One mechanism for every kind of read: torch hands each tensor
    method and operator called under the mode to __torch_function__. Inside a graph dynamo traces it counts nothing
    (torch.compiler.is_compiling(): a read there would be a graph break, which fullgraph=True refuses)."""

    def __init__(self, where: str = "cse_kit/", outside: str | None = None, moves_in: str = "cse_kit/"):
        super().__init__()
        self.where, self.outside, self.moves_in = where, outside, moves_in
        self.on, self.calls = False, collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not torch.compiler.is_compiling() and self.on:
            name = getattr(func, "__name__", "")
            if name in HOST_READS or _moves_to_the_host(name, args, kwargs):
                self._count(name, sys._getframe(1))
        return func(*args, **kwargs)

    def _count(self, name: str, frame) -> None:
        filename = frame.f_code.co_filename
        if name == "to" and self.moves_in not in filename:
            # torch's and the model's own `.to(device)` keep a tensor on its device (clip_grad_norm_ stacks each
            # gradient's norm on the first gradient's), which a CPU run cannot tell from a move to the host: a
            # `.to()` counts in the kit's code (`moves_in`), whose step moves nothing to where it already is
            return
        if self.where in filename and not (self.outside and self.outside in filename):
            self.calls[f"{_where(filename)}:{frame.f_code.co_name} {name}"] += 1


def test_the_counter_counts_every_host_read_and_nothing_else():
    """Each read the issue names, through the one mode; a device-side computation, a non-blocking copy and a dtype
    change are not reads."""
    x = torch.tensor([1.0, 2.0])
    with HostReads(where="test_step.py", moves_in="test_step.py") as reads:
        reads.on = True
        x[0].item(), x.tolist(), x.numpy(), float(x[0]), int(x[0]), bool(x[0]), [1, 2][x[0].long()]
        if x[0]:
            x.cpu(), x.to("cpu"), x.to(torch.device("cpu")), x.to(device="cpu"), x.detach().to("cpu")
        x.to(torch.float64), x.to("cpu", non_blocking=True), (x * 2).sum(), torch.where(x > 1, x, 0)
    where = f"{_where(__file__)}:test_the_counter_counts_every_host_read_and_nothing_else"
    assert reads.calls == collections.Counter({f"{where} {name}": n for name, n in {
        "item": 1, "tolist": 1, "numpy": 1, "__float__": 1, "__int__": 1, "__bool__": 2, "__index__": 1,
        "cpu": 1, "to": 4}.items()})


def _between_logging_steps(monkeypatch, reads: HostReads, first: int, last: int) -> None:
    """Counting on from the start of step `first` (numbered from 1) to the start of step `last`, off while a step's
    host part makes its batch (the data, a method's host draws: no device value is read there)."""
    optimizer_step, host_batch = loop._Training.optimizer_step, TrainStep.host_batch

    def step(self):
        reads.on = first <= self.state.step + 1 < last
        return optimizer_step(self)

    def host(self, *args):
        was, reads.on = reads.on, False
        try:
            return host_batch(self, *args)
        finally:
            reads.on = was

    monkeypatch.setattr(loop._Training, "optimizer_step", step)
    monkeypatch.setattr(TrainStep, "host_batch", host)


#: the host reads the docs name (docs/training.md, "No host reads inside a step"), and nothing else: DiffAug's
#: template denoising runs one row per sentence length present, as the official code (models.py:281-284): it reads
#: the longest length, once a step (a GPU waits for it there; the rows' number is the batch's to decide)
DOCUMENTED_READS = {"diffaug": {"cse_kit/methods/diffaug.py:denoised __int__": 3}}


def _code_path(cfg) -> tuple:
    """What of a run's settings picks the code its step runs: the method, each option of it that chooses (a word
    or a switch; not a number, a model or a size, which change values only), whether ESimCSE keeps a queue, the
    semi-supervised strategy and auxiliary loss, the pooler, the kind of data (NLI triplets, an ordered corpus's
    sentence pairs, sentences) and whether batches are drawn within length buckets."""
    options = tuple(sorted((k, v) for k, v in cfg.method_options.items() if k not in ("generator", "projector")
                           and (v is None or isinstance(v, (bool, str)))))
    return (cfg.method, options, bool(cfg.method_options.get("queue_size")), cfg.semi_strategy, bool(cfg.aux_weight),
            cfg.pooler, is_nli(cfg.data), cfg.data in ORDERED_CORPORA, bool(cfg.length_buckets))


def _report_configs(profile: str) -> list:
    """Every training config the report's notebooks train on `profile`, as `cse-kit report --plan` lists them
    (report.plan.plan: the notebooks' own row builders and defaults), without pricing them (which reads the data);
    not the runs of a method of one's own that another test registered in this process (its code is not the kit's)."""
    from cse_kit.papers.comparison import own_methods
    from cse_kit.report import plan as report_plan
    from cse_kit.report.notebooks import NOTEBOOKS
    from cse_kit.train.config import TrainConfig

    with tempfile.TemporaryDirectory() as store, \
            mock.patch.object(report_plan, "run_steps", lambda cfg, data_dir=None: (0, 0, [])):
        runs = report_plan.plan(profile, [n for n in NOTEBOOKS if n in report_plan.NEEDS], store).runs
    yours = own_methods()
    return [r.subject for r in runs.values() if isinstance(r.subject, TrainConfig) and r.subject.method not in yours]


def _path_name(cfg) -> str:
    """The smoke preset and what the config changes of it that picks code (_code_path)."""
    preset = build_config(cfg.preset, "smoke")
    usual = preset.method_options if cfg.method == preset.method else \
        {f.name: f.default for f in dataclasses.fields(method_class(cfg.method).Options)}
    words = [f"{k}={v}" for k, v in sorted(cfg.method_options.items())
             if (k, v) in _code_path(cfg)[1] and v != usual.get(k)]
    if cfg.method == "esimcse" and _code_path(cfg)[2] != _code_path(preset)[2]:
        words.append("queue_size=0")
    words += [f"{k}={getattr(cfg, k)}" for k in ("method", "semi_strategy", "pooler", "data")
              if getattr(cfg, k) != getattr(preset, k)]
    return "+".join([cfg.preset, *words])


def _report_code_paths() -> dict:
    """{name: a smoke config} for each code path the report trains (_code_path): the seven methods' smoke presets
    first, then the first smoke run of each other path."""
    configs = {}
    for cfg in [build_config(p, "smoke") for p in COMPILED_GRAPHS] + _report_configs("smoke"):
        configs.setdefault(_code_path(cfg), cfg)
    return {_path_name(cfg): cfg for cfg in configs.values()}


REPORT_PATHS = _report_code_paths()
#: the paths the default suite trains: the seven presets and DiffCSE's edits drawn on the host (insert, delete, all,
#: and Table 15's extra view); the others are slow
QUICK_PATHS = {*COMPILED_GRAPHS, "diffcse-bert-sts+edit=insert", "diffcse-bert-sts+edit=all",
               "diffcse-bert-sts+edit=delete", "simcse-bert+edit=insert+task=negative+method=diffcse"}


def test_the_host_read_test_trains_every_code_path_the_report_trains():
    """The paper profile's report (what `cse-kit report --plan` bills: 994 runs) takes no code path that the smoke
    paths below miss; among them DiffCSE's insertion and `all` edits (Tables 4 and 15)."""
    assert {_code_path(c) for c in _report_configs("paper")} <= {_code_path(c) for c in REPORT_PATHS.values()}
    assert QUICK_PATHS <= set(REPORT_PATHS)


@pytest.mark.parametrize("path", [p if p in QUICK_PATHS else pytest.param(p, marks=pytest.mark.slow)
                                  for p in REPORT_PATHS])
def test_the_loop_reads_nothing_from_the_device_between_two_logging_steps(path, data_dir, tmp_path, monkeypatch):
    """Steps 5-7 run between the logging steps 4 and 8 (log_steps 4; 8 evaluates too): the loop and the method read
    no tensor's value there but the reads the docs name (transformers' eager attention asks whether a mask masks
    anything: a compiled step traces that away), on every code path the report trains."""
    cfg = REPORT_PATHS[path]
    preset = build_config(cfg.preset, "smoke")
    # what the run trains on and when it saves as its preset's, a first stage of at most 4 steps (a report row's 1%
    # of NLI, or its stage-1 snapshot every step, would put the run's end or a save between the logging steps; steps
    # 5-7 are main-stage steps for every method): its code path unchanged
    cfg = dataclasses.replace(cfg, data_dir=str(data_dir), output_dir=str(tmp_path / "run"), max_steps=8,
                              log_steps=4, eval_steps=8, epochs=8, nli_fraction=preset.nli_fraction,
                              stage1_steps=min(cfg.stage1_steps, 4), stage1_snapshot_steps=preset.stage1_snapshot_steps)
    reads = HostReads("cse_kit/")
    _between_logging_steps(monkeypatch, reads, 5, 8)
    with reads:
        train(cfg, progress=False)
    assert reads.calls == collections.Counter(DOCUMENTED_READS.get(cfg.method, {}))
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
    reads = HostReads("", outside="torch/optim/")
    _between_logging_steps(monkeypatch, reads, 5, 8)
    cfg = build_config("simcse-bert", "smoke", {"data_dir": str(data_dir), "output_dir": str(tmp_path / "run"),
                                                "max_steps": 8, "log_steps": 4, "eval_steps": 8, "pad_to": "fixed",
                                                "compile": True})
    with reads:
        train(cfg, progress=False)
    assert not reads.calls and not counters["graph_break"]


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
