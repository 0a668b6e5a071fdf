"""Training speed at the papers' shape (issue 26): `python bench/train_speed.py --shape bert-base|roberta-base`.

  python bench/train_speed.py --shape bert-base [--device cuda|cpu] [--methods simcse,diffcse,...] [--steps 8]
                              [--warmup 2] [--batch-size N] [--peak-tflops T] [--dev-pairs N] [--tf32]
                              [--pad longest|fixed|buckets] [--compile [true|reduce-overhead|max-autotune|...]]
                              [--sync-check N] [--mixed-precision no|bf16|fp16|no,bf16] [--profile]
                              [--output result.json]

What is timed is what trains: the loop's own step, cse_kit.train.step.TrainStep, built as the loop builds it
(an Accelerator from cse_kit.train.precision.build_accelerator, the stages' steps, the optimizers and schedules
and Accelerate's prepare of cse_kit.train.setup), with each step's batches made (and timed) just before it.

What is built, all from configs (no download, random weights):
- the encoder: BERT-base (`transformers.BertConfig()`) or RoBERTa-base (`RobertaConfig` with roberta-base's sizes),
  without the NSP pooler, dropout as the preset sets it; DiffCSE's generator: DistilBERT's shape (DistilRoBERTa's for
  RoBERTa: 6 layers of roberta-base's width) with a masked-LM head. `--shape tiny` is BERT's code at a tiny width (2
  layers of 32, bert-base-uncased's vocabulary; its generator a 2-layer DistilBERT of that width): the same code path
  in seconds on a CPU (tests, `bench/gpu_check.sh --device cpu`), not a speed anyone trains at;
- each method through the kit's own `build_config(preset, "paper", overrides)` and `build_objective`, so the paper
  presets' batch sizes, templates, projectors and settings apply (`--batch-size` overrides the batch);
- the tokenizer: the offline all-MiniLM-L6-v2's, i.e. bert-base-uncased's vocabulary. No RoBERTa tokenizer is
  available offline: the RoBERTa shape reads the same bert-base-uncased tokenization for its lengths, with every
  sentence token replaced by a random id of RoBERTa's vocabulary (>= 1000, so no id is a special token), and the
  special and template tokens left as bert-base-uncased's ids (all < 30522; RoBERTa's position ids still count
  from padding_idx 1, while the batches pad with id 0: the attention mask, not the pad id, decides what is attended);
- the corpus: the local Wiki1M sample (11,913 lines) repeated to Wiki1M's 1,000,000 lines in memory; a batch's
  sentences are tokenized when the batch is read, so the data time is tokenization + batching + the copy to the
  device (the loop tokenizes the whole corpus once, up front: the same work, spread over the steps here). DiffAug's
  stage 1 reads the local SNLI dev + test triplets (the SNLI-triplets stand-in for NLI) the same way;
- the padding: `--pad`, else the run's pad_to=auto resolved for the device (cse_kit.train.step.resolve_padding: fixed
  on CUDA, longest on a CPU). fixed pads every batch to the data's longest row, measured over the distinct lines (the
  repeated corpus's rows are theirs), one shape for the whole run: what a captured step wants.

Timed per step (torch.cuda.synchronize around each part on CUDA): data (the step's batches read, tokenized, padded,
what the method draws from them on the host, copied to the device: TrainStep.batch) and the step (TrainStep.step:
forward, backward, gradient clipping, the optimizer and schedule stepped, gradients zeroed; fused AdamW on CUDA, as
the loop). The step is not split further: a split would put a synchronisation inside it, which the loop's step does
not have. Medians of `--steps` steps after `--warmup` steps.
Then one dev evaluation (DevEvaluator on STS-B dev, + SICK-R dev where the preset selects on it; `--dev-pairs N`
times the first N pairs of each and scales the time linearly to the whole set) and one checkpoint (the
model's safetensors, the optimizer's and RNG states, as Accelerate's save_state writes them) into a temporary
folder. The methods are timed one after the other (one objective in memory at a time).

FLOPs per step: 6 x non-embedding parameters x positions (padded) for every transformer pass with gradients, and 2 x
for a pass without (DiffCSE's generator, ESimCSE's momentum encoder), counted by forward hooks on the transformer
models; vocabulary projections, attention scores, projectors and DiffAug's prefix attention are left out (and a
frozen encoder that passes gradients back, DiffAug's stage 1 of the paper variant, counts 4 x: its weights take no
gradient, as in the loop: cse_kit.train.optim.stage_gradients). The fraction of peak divides the achieved FLOP/s by
the device's dense tensor peak for the precision run (speed_report.PEAK_TFLOPS; `--peak-tflops` for others; on CPU
the matmul ceiling of the precision's dtype, one 2048³ product measured in the same run).
`--mixed-precision no,bf16` times each method in each precision, one after the other, and prints the later one's
speed-up; `--profile` prints torch.profiler's operator table of one more step per method and precision (a two-stage
method's stage-1 step too).

Projected wall time of a preset's full run: its steps (epochs x 1,000,000 / batch, + DiffAug's stage-1 steps at their
own step time) x the step time, + its dev evaluations (every eval_steps steps and at the end) x the dev time, + a
checkpoint every checkpoint_minutes of that time (or every save_steps) x the checkpoint time.

`--compile [MODE]` times every method again with the modules it names compiled in place
(cse_kit.train.step.compile_modules, as `--set compile=MODE` does: true, torch.compile's default mode, when no mode is
given; reduce-overhead captures them in CUDA graphs, one graph per shape, so give it `--pad fixed`) and prints the
payoff: the compile time (the first compiled steps over an eager step), the compiled step time, the steps after which
it has paid for itself and the time it saves on the full run. `--sync-check N` (CUDA) runs N more steps (eager, and
compiled with --compile) under torch.cuda.set_sync_debug_mode("warn") and prints the host synchronisations per step,
in the data part and in the step, with where the step's come from. `--tf32`
(CUDA only) times every method again with TF32 matmuls allowed and prints the speed-up; whether TF32 moves an
evaluation number is `python bench/eval_speed.py full --tf32`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from cse_kit.train.setup import main_stage_steps, optimization, stage_steps
from cse_kit.train.step import TrainStep, compile_modules
from speed_report import peak_tflops, precision_name, print_report, profile_step, write_output

#: method -> (row name, preset) per shape: one preset per method, the paper's main unsupervised recipe
PRESETS = {
    "bert-base": {"simcse": "simcse-bert", "diffcse": "diffcse-bert-sts", "scd": "scd-bert", "esimcse": "esimcse-bert",
                  "diffaug": "diffaug-semi-bert", "promptbert": "promptbert-bert", "consert": "consert-bert"},
    "roberta-base": {"simcse": "simcse-roberta", "diffcse": "diffcse-roberta-sts", "scd": "scd-roberta",
                     "esimcse": "esimcse-roberta", "diffaug": "diffaug-semi-roberta",
                     "promptbert": "promptroberta-roberta", "consert": "consert-roberta"},
}
PRESETS["tiny"] = PRESETS["bert-base"]
#: --shape tiny: BERT's code at the width of the kit's smoke models (bert-base-uncased's vocabulary and positions)
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
#: --shape tiny's generator: DistilBERT's code at that width
TINY_GENERATOR = {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}
NAMES = {"simcse": "SimCSE", "diffcse": "DiffCSE", "scd": "SCD", "esimcse": "ESimCSE", "diffaug": "DiffAug",
         "promptbert": "PromptBERT", "consert": "ConSERT"}
#: lines of each training corpus of the presets timed here (Wiki1M: wiki1m_for_simcse.txt)
CORPUS_LINES = {"Wiki1M": 1_000_000}
#: roberta-base's sizes beside RobertaConfig's defaults (which are BERT-base's)
ROBERTA_BASE = {"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
                "bos_token_id": 0, "eos_token_id": 2, "layer_norm_eps": 1e-5}
#: the first id a random RoBERTa token takes: bert-base-uncased's special tokens are all below it
RANDOM_ID_START = 1000

#: the parts of a step timed apart: its batches (TrainStep.batch) and the step itself (TrainStep.step)
PARTS = ("data", "step")


# --- models and data --------------------------------------------------------------------------------------------

def shape_tokenizer():
    """bert-base-uncased's tokenizer, as the offline all-MiniLM-L6-v2 ships it."""
    from transformers import AutoTokenizer

    from cse_kit.models import resolve_reference

    return AutoTokenizer.from_pretrained(resolve_reference("all-MiniLM-L6-v2"))


def shape_encoder(shape: str, dropout: float | None = None, mlm: bool = False, layers: int | None = None):
    """BERT-base or RoBERTa-base (random weights) without the NSP pooler, or its masked LM; `layers` makes the
    6-layer DistilBERT / DistilRoBERTa generator. tiny: BERT's code at TINY's width (its generator TINY_GENERATOR)."""
    import transformers

    kwargs = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    if shape == "tiny":
        if layers:
            return transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(**TINY_GENERATOR))
        config = transformers.BertConfig(**TINY, **kwargs)
        return transformers.BertForMaskedLM(config) if mlm else transformers.BertModel(config, add_pooling_layer=False)
    if shape == "bert-base":
        if layers:  # DistilBERT-base: 6 layers of BERT-base's width, its own architecture
            return transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(n_layers=layers))
        config = transformers.BertConfig(**kwargs)
        return transformers.BertForMaskedLM(config) if mlm else transformers.BertModel(config, add_pooling_layer=False)
    config = transformers.RobertaConfig(**ROBERTA_BASE, **kwargs, **({"num_hidden_layers": layers} if layers else {}))
    return transformers.RobertaForMaskedLM(config) if mlm else transformers.RobertaModel(config,
                                                                                         add_pooling_layer=False)


class RepeatedCorpus:
    """`lines` examples cycling through `examples`, each batch tokenized when it is read (`dataset[index]`, what
    cse_kit.train.data.Batches reads): the columns ids0, ids1, ... of a tokenized corpus or NLI set."""

    def __init__(self, examples: list[tuple[str, ...]], lines: int, encode):
        self.examples, self.lines, self.encode = examples, lines, encode
        self.column_names = [f"ids{k}" for k in range(len(examples[0]))]

    def __len__(self) -> int:
        return self.lines

    def __getitem__(self, index: list[int]) -> dict:
        rows = [self.examples[i % len(self.examples)] for i in index]
        return {c: self.encode([r[k] for r in rows]) for k, c in enumerate(self.column_names)}


def sentence_encoder(tokenizer, max_length: int, template=None, random_vocab: int | None = None, seed: int = 0):
    """texts -> token id lists as cse_kit.train.data.tokenize makes them (truncated to max_length with [CLS] and
    [SEP], or the sentence's first max_length sub-words inside the template); with `random_vocab` every sentence
    token becomes a random id in [RANDOM_ID_START, random_vocab)."""
    rng = np.random.default_rng(seed)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id

    def encode(texts: list[str]) -> list[list[int]]:
        if template is not None:
            ids = [x[:max_length] for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        else:
            ids = [x[1:-1] for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
        if random_vocab:
            ids = [rng.integers(RANDOM_ID_START, random_vocab, len(x)).tolist() for x in ids]
        return [template.wrap_ids(x) if template is not None else [cls, *x, sep] for x in ids]

    return encode


def build_method(key: str, args, tokenizer, precision: str | None = None, **settings):
    """(config, objective) of the method's preset on the paper profile, around a config-built encoder; `precision`:
    its mixed_precision instead of the preset's; `settings`: other TrainConfig settings (grad_cache=32)."""
    from cse_kit.train import build_config, build_objective

    preset = PRESETS[args.shape][key]
    batch = {"batch_size": args.batch_size, "nli_batch_size": args.batch_size} if args.batch_size else {}
    overrides = {"data_dir": args.data_dir, **batch,
                 **({"mixed_precision": precision} if precision else {}), **settings}
    cfg = build_config(preset, "paper", overrides)
    torch.manual_seed(0)
    encoder = shape_encoder(args.shape, cfg.dropout)

    def generator(ref, data_dir=None):  # DiffCSE's (and ESimCSE's masked-prediction) generator, from its config
        return shape_encoder(args.shape, mlm=True, layers=6)

    with mock.patch("cse_kit.methods.mlm_head.load_generator", generator):
        return cfg, build_objective(cfg, tokenizer, encoder)


def method_batches(cfg, tokenizer, args, nli: bool = False, padding: str = "longest"):
    """cse_kit.train.data.Batches over the repeated Wiki1M sample (or, nli, the SNLI triplets, 275,601 rows as NLI),
    in the method's template if it has one, padded as `padding` says (cse_kit.train.step.resolve_padding)."""
    from cse_kit.data.registry import SNLI_TRIPLETS
    from cse_kit.eval.prompt import Template
    from cse_kit.train.data import Batches, load_examples

    template = Template(tokenizer, cfg.template) if cfg.template else None
    vocab = ROBERTA_BASE["vocab_size"] if args.shape == "roberta-base" else None
    encode = sentence_encoder(tokenizer, cfg.max_seq_length, template, vocab)
    examples = load_examples(SNLI_TRIPLETS if nli else "Wiki1M-sample", args.data_dir)
    lines = 275_601 if nli else CORPUS_LINES[cfg.data]
    # Batches would measure the data's longest row over every row (longest_row): here a million rows, each tokenized
    # when read. The repeated corpus's rows are its examples', so their longest is measured once
    fixed = longest_example(examples, encode) if padding != "longest" else None
    return Batches(RepeatedCorpus(examples, lines, encode), cfg.nli_batch_size if nli else cfg.batch_size,
                   cfg.seed, tokenizer.pad_token_id, padding=padding, fixed_length=fixed)


def longest_example(examples: list[tuple[str, ...]], encode, chunk: int = 4096) -> int:
    """The most ids any text of `examples` encodes to (each column, `chunk` texts at a time)."""
    return max(len(ids) for k in range(len(examples[0])) for start in range(0, len(examples), chunk)
               for ids in encode([ex[k] for ex in examples[start:start + chunk]]))


# --- measuring ----------------------------------------------------------------------------------------------------

def nonembedding_params(model) -> int:
    """Weights outside the input embedding and the vocabulary projection (often the same tied matrix)."""
    vocab = [model.get_input_embeddings().weight]
    if model.get_output_embeddings() is not None:
        vocab.append(model.get_output_embeddings().weight)
    return sum(p.numel() for p in model.parameters() if all(p is not v for v in vocab))


@contextlib.contextmanager
def count_flops(objective):
    """Yields a list that collects each transformer pass's FLOPs (see the module's docstring): hooks on every
    transformers model inside the objective, a pass counted by the outermost model that runs it."""
    from transformers import PreTrainedModel

    flops, depth, handles = [], [0], []

    def before(module, args, kwargs):
        if depth[0] == 0:
            x = kwargs.get("input_ids", args[0] if args else None)
            x = kwargs.get("inputs_embeds") if x is None else x
            positions = x.shape[0] * x.shape[1]
            # 2 forward, 2 for the input's gradient, 2 for the weights' where they take one
            backward = torch.is_grad_enabled()
            weights = backward and any(p.requires_grad for p in module.parameters())
            flops.append((2 + 2 * backward + 2 * weights) * module._bench_params * positions)
        depth[0] += 1

    def after(module, args, output):
        depth[0] -= 1

    for module in objective.modules():
        if isinstance(module, PreTrainedModel):
            module._bench_params = nonembedding_params(module)
            handles += [module.register_forward_pre_hook(before, with_kwargs=True),
                        module.register_forward_hook(after)]
    try:
        yield flops
    finally:
        for h in handles:
            h.remove()


def step_accelerator(setting: str, device):
    """The Accelerator a run on `device` trains with (cse_kit.train.precision.build_accelerator: mixed_precision
    `setting` resolved here). It trains on the GPU wherever one is visible: a CPU measurement on a GPU machine hides
    it first (main: CUDA_VISIBLE_DEVICES=)."""
    from cse_kit.train.precision import build_accelerator

    if (device.type == "cuda") != torch.cuda.is_available():
        fix = "hide it with CUDA_VISIBLE_DEVICES=" if torch.cuda.is_available() else "no GPU is visible"
        raise SystemExit(f"--device {device.type}: Accelerate trains on the GPU wherever one is visible; {fix}")
    return build_accelerator(setting)


def main_steps(cfg) -> int:
    """The main stage's optimizer steps of the preset's full run (over CORPUS_LINES), as setup.main_stage_steps."""
    return main_stage_steps(cfg, CORPUS_LINES[cfg.data] // cfg.batch_size)


def train_step(cfg, objective, batches, nli_batches, device, steps_per_epoch: int | None = None) -> TimedStep:
    """The loop's step (cse_kit.train.step.TrainStep) of `objective`, built as the loop builds it: the Accelerator of
    the run's precision, then cse_kit.train.setup's stage_steps (epochs of `steps_per_epoch` batches, default the
    preset's corpus, CORPUS_LINES) and optimization (compiled where cfg.compile says)."""
    accelerator = step_accelerator(cfg.mixed_precision, device)
    first_stage, main = stage_steps(cfg, steps_per_epoch or CORPUS_LINES[cfg.data] // cfg.batch_size, objective)
    run = optimization(cfg, objective, accelerator, first_stage, main)
    return TimedStep(cfg, accelerator, run.objective, run.unwrapped, run.params, run.optimizers, run.schedulers,
                     batches, nli_batches, first_stage)


class TimedStep(TrainStep):
    """TrainStep with its batches made beforehand (`prepare`, timed apart), and handed to the step by `batch`:
    the rest of the step is the loop's, unchanged."""

    ready: list = []

    @property
    def precision(self) -> str:
        return self.accelerator.mixed_precision

    @property
    def device(self):
        return self.accelerator.device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def stage_of(self, step: int) -> int:
        return 1 if step < self.first_stage else 2

    def prepare(self, step: int) -> None:
        """Step `step`'s batches on the device, as TrainStep.batch makes them inside a step."""
        stage = self.stage_of(step)
        micro_batches = 1 if stage == 1 else self.cfg.gradient_accumulation
        self.ready = [TrainStep.batch(self, step, stage, micro) for micro in range(micro_batches)]

    def batch(self, step: int, stage: int, micro: int) -> dict:
        return self.ready[micro]

    def timed(self, step: int) -> dict:
        """Seconds of step `step`'s parts: its batches, then the step."""
        self.sync()
        t0 = time.perf_counter()
        self.prepare(step)
        self.sync()
        t1 = time.perf_counter()
        self.step(step)
        self.sync()
        return {"data": t1 - t0, "step": time.perf_counter() - t1}

    def compiled(self, mode) -> "TimedStep":
        """The same step (objective, optimizers, schedules, batches) with the modules the method names compiled
        in place, as a run with compile=mode trains (compile_modules)."""
        compile_modules(self.unwrapped, mode)
        return TimedStep(self.cfg.replace(compile=mode), self.accelerator, self.objective, self.unwrapped,
                         self.params, self.optimizers, self.schedulers, self.batches, self.nli_batches,
                         self.first_stage)


def time_steps(step, steps: int, warmup: int, start: int = 0, count: bool = True) -> dict:
    """Median seconds of each part over `steps` steps after `warmup` steps, from run step `start` on (a two-stage
    method's main stage starts at its first_stage), the seconds of the warm-up steps, and (count) the mean FLOPs
    of a timed step."""
    step.objective.train()
    warm = [sum(step.timed(start + i).values()) for i in range(warmup)]
    timed, flops = [], []
    with count_flops(step.unwrapped) if count else contextlib.nullcontext([]) as passes:
        for i in range(warmup, warmup + steps):
            before = len(passes)
            timed.append(step.timed(start + i))
            flops.append(sum(passes[before:]))
    parts = {k: statistics.median(t[k] for t in timed) for k in PARTS}
    return {"parts": parts, "step_s": sum(parts.values()), "warmup_s": warm,
            "flops": statistics.mean(flops) if count else None}


#: what torch warns at each synchronising CUDA call under set_sync_debug_mode("warn")
SYNC_WARNING = "called a synchronizing CUDA operation"


def count_syncs(step, steps: int, start: int = 0) -> dict | None:
    """Host synchronisations per step, in the data part and in the step, over `steps` steps from `start` under
    torch.cuda.set_sync_debug_mode("warn") (every one warns), with the step's by where they come from (file:line,
    most frequent first); None off CUDA."""
    if not steps or step.device.type != "cuda":
        return None
    counts, where = {"data": 0, "step": 0}, Counter()
    step.objective.train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for i in range(start, start + steps):
                for part, run in (("data", step.prepare), ("step", step.step)):
                    before = len(caught)
                    run(i)
                    syncs = [w for w in caught[before:] if SYNC_WARNING in str(w.message)]
                    counts[part] += len(syncs)
                    if part == "step":
                        where.update(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    step.sync()
    return {**{k: v / steps for k, v in counts.items()}, "steps": steps, "where": where.most_common(5)}


def time_dev(objective, cfg, tokenizer, device, args) -> dict:
    """Seconds of one dev evaluation as the loop runs it (its test model, pooler and sets), after a warm-up call on
    8 pairs, scaled from the first args.dev_pairs pairs of each set when given."""
    from cse_kit.eval import DevEvaluator
    pooler = objective.test_pooler
    dev = DevEvaluator(tokenizer, pooler, args.data_dir, sickr=cfg.metric in ("sickr_spearman", "avg_sts"),
                       transfer=cfg.metric == "transfer_devacc", device=device, template=cfg.template)
    full = sum(len(pairs) for pairs in dev.sts.values())
    if args.dev_pairs:
        dev.sts = {name: pairs[:args.dev_pairs] for name, pairs in dev.sts.items()}
    timed = sum(len(pairs) for pairs in dev.sts.values())
    sets, dev.sts = dev.sts, {name: pairs[:8] for name, pairs in dev.sts.items()}
    from cse_kit.train.step import eager

    with eager():  # as the loop evaluates: compiled modules run eagerly
        dev(objective.test_model()[0])  # warm-up on 8 pairs: the first call's one-off costs are not an evaluation's
        dev.sts = sets
        seconds = dev(objective.test_model()[0])["seconds"]
    objective.train()
    return {"seconds": seconds * full / timed, "pairs": timed, "of": full}


def time_checkpoint(objective, optimizers: list, device, folder=None) -> float:
    """Seconds to write what a run's checkpoint holds (cse_kit.train.checkpoint): the model's safetensors (shared
    tensors once), the optimizer's, the RNG states and the trainer state with every file's SHA-256."""
    from cse_kit.io import write_json_atomic
    from cse_kit.train.checkpoint import STATE, trainer_state, write_process_files

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        sync()
        t = time.perf_counter()
        write_process_files(Path(tmp), 0, objective, optimizers, main=True)
        write_json_atomic(Path(tmp) / STATE, trainer_state(Path(tmp), {"step": 0}, [], None, 1))
        return time.perf_counter() - t


# --- the projection -----------------------------------------------------------------------------------------------

def project(cfg, main: dict, stage1: dict | None, dev_s: float, checkpoint_s: float) -> dict:
    """Seconds of the preset's full run by part: stage-1 and main steps (a step's parts hold all its micro-batches),
    dev evaluations, checkpoints."""
    steps = main_steps(cfg)
    first = cfg.stage1_steps if stage1 else 0
    total = first + steps
    per_part = {k: main["parts"][k] * steps + (stage1["parts"][k] * first if stage1 else 0) for k in PARTS}
    evaluations = total // cfg.eval_steps + (1 if total % cfg.eval_steps else 0)
    per_part["dev evaluation"] = evaluations * dev_s
    before = sum(per_part.values())
    checkpoints = (total - 1) // cfg.save_steps if cfg.save_steps else int(before // (60 * cfg.checkpoint_minutes))
    per_part["checkpoint"] = checkpoints * checkpoint_s
    return {"steps": steps, "stage1_steps": first, "evaluations": evaluations, "checkpoints": checkpoints,
            "parts_s": per_part, "total_s": sum(per_part.values())}


# --- one method -------------------------------------------------------------------------------------------------

def measure_method(key: str, args, tokenizer, device, precision: str | None = None) -> dict:
    from cse_kit.train.step import resolve_padding

    cfg, objective = build_method(key, args, tokenizer, precision)
    padding = resolve_padding(args.pad or cfg.pad_to, device.type == "cuda")
    batches = method_batches(cfg, tokenizer, args, padding=padding)
    two_stage = objective.two_stages and cfg.stage1_steps
    nli = method_batches(cfg, tokenizer, args, nli=True, padding=padding) if two_stage or cfg.aux_weight else None
    step = train_step(cfg, objective, batches, nli, device)
    start = step.first_stage  # the main stage's first step
    label = f"{NAMES[key]} {precision_name(step.precision)}"
    main = time_steps(step, args.steps, args.warmup, start)
    if args.profile:
        profile_step(step, start + args.warmup + args.steps, label)
    stage1 = None
    if two_stage:
        stage1 = time_steps(step, args.steps, args.warmup, 0)
        if args.profile:
            profile_step(step, args.warmup + args.steps, f"{NAMES[key]} stage-1 {precision_name(step.precision)}")
        step.unwrapped.stage = 2
    syncs = count_syncs(step, args.sync_check, start + 2 * (args.warmup + args.steps))
    dev = time_dev(step.unwrapped, cfg, tokenizer, device, args)
    checkpoint_s = time_checkpoint(step.unwrapped, step.optimizers, device, args.checkpoint_dir)
    projection = project(cfg, main, stage1, dev["seconds"], checkpoint_s)
    result = {"method": NAMES[key], "preset": cfg.preset, "batch_size": cfg.batch_size, "precision": step.precision,
              "padding": padding, "fixed_length": batches.fixed_length, "main": main, "stage1": stage1,
              "stage1_batch_size": cfg.nli_batch_size if stage1 else None, "syncs": syncs,
              "dev": dev, "checkpoint_s": checkpoint_s, "projection": projection}
    if args.tf32 and device.type == "cuda":
        result["tf32"] = measure_tf32(step, args)
    if args.compile:
        result["compile"] = measure_compile(step, args, main, projection)
    if device.type == "cuda":
        step.accelerator.free_memory()  # Accelerate's references to the prepared objective and optimizers
    return result


def measure_tf32(step, args) -> dict:
    """The same steps with TF32 matmuls allowed (the baseline: torch's default, not allowed)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        on = time_steps(step, args.steps, args.warmup, step.first_stage, count=False)
    finally:
        torch.set_float32_matmul_precision(previous)
    off = time_steps(step, args.steps, args.warmup, step.first_stage, count=False)  # re-timed beside it: same state
    return {"off_step_s": off["step_s"], "on_step_s": on["step_s"]}


def measure_compile(step, args, eager: dict, projection: dict) -> dict:
    """The modules the method names compiled in place, as a run with compile=args.compile trains
    (TimedStep.compiled): the first steps' extra seconds (compilation, recompiles for new widths and, captured, the
    graphs' recording included) and the compiled step time; with --sync-check, its host synchronisations."""
    compiled = step.compiled(args.compile)
    start = step.first_stage
    timed = time_steps(compiled, args.steps, max(args.warmup, 3), start, count=False)
    extra = sum(timed["warmup_s"]) - len(timed["warmup_s"]) * eager["step_s"]
    saved = eager["step_s"] - timed["step_s"]
    steps = projection["steps"]
    return {"mode": args.compile, "captured": compiled.captured, "step_s": timed["step_s"], "parts": timed["parts"],
            "compile_s": extra, "speedup": eager["step_s"] / timed["step_s"],
            "break_even_steps": math.ceil(extra / saved) if saved > 0 else None,
            "full_run_saving_s": saved * steps - extra,
            "syncs": count_syncs(compiled, args.sync_check, start + 4 * (args.warmup + args.steps))}


# --- the command --------------------------------------------------------------------------------------------------

def precisions(text: str) -> list[str]:
    """--mixed-precision's comma-separated settings."""
    chosen = text.split(",")
    wrong = [p for p in chosen if p not in ("auto", "no", "bf16", "fp16")]
    if wrong:
        raise argparse.ArgumentTypeError(f"unknown precision(s) {', '.join(wrong)}: choose from auto, no, bf16, fp16")
    return chosen


def compile_mode(text: str):
    """--compile's mode: true (torch.compile's default mode), false, or a mode's name (TrainConfig.compile)."""
    from cse_kit.train.config import COMPILE_MODES

    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text not in COMPILE_MODES:
        raise argparse.ArgumentTypeError(f"compile takes true, false or one of {', '.join(COMPILE_MODES)}")
    return text


def hide_gpu_for_cpu(device: str | None) -> None:
    """--device cpu on a machine with a GPU: the GPU hidden before torch first asks for it (Accelerate trains on
    the GPU wherever one is visible)."""
    if device == "cpu" and not torch.cuda.is_initialized():
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def main(args) -> list[dict]:
    from cse_kit.environment import keep_freed_memory

    hide_gpu_for_cpu(args.device)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        keep_freed_memory()  # as cse-kit train does on CPU
    methods = (args.methods or ",".join(PRESETS[args.shape])).split(",")
    unknown = [m for m in methods if m not in PRESETS[args.shape]]
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(PRESETS[args.shape])}")
    if args.tf32 and device.type != "cuda":
        print("--tf32: TF32 is a CUDA (Ampere and later) matmul mode; nothing to measure on CPU")
    tokenizer = shape_tokenizer()
    results = []
    for key in methods:
        for precision in args.mixed_precision or [None]:
            results.append(measure_method(key, args, tokenizer, device, precision))
            write_output(args.output, results, args, device, None)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    peaks = {p: peak_tflops(device, p, args.peak_tflops) for p in dict.fromkeys(r["precision"] for r in results)}
    print_report(results, args, device, peaks)
    write_output(args.output, results, args, device, peaks)
    return results


def add_arguments(p) -> None:
    g = p.add_argument_group("paper shape (issue 26): --shape bert-base|roberta-base|tiny")
    g.add_argument("--shape", choices=sorted(PRESETS), help="time every method at this shape (bench/paper_speed.py; "
                                                            "tiny: BERT's code at a tiny width, for tests)")
    g.add_argument("--device", help="cuda or cpu (default: cuda if available)")
    g.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    g.add_argument("--peak-tflops", type=float, help="the device's peak TFLOP/s for the precision run")
    g.add_argument("--dev-pairs", type=int, help="time the dev evaluation on the first N pairs of each set, scaled "
                                                 "linearly (for tests: a small N overstates the time)")
    g.add_argument("--mixed-precision", type=precisions,
                   help="instead of the preset's (auto: bf16 on CUDA, else fp16; on CPU bf16 where a unit multiplies "
                        "bf16, else fp32); several, comma-separated (no,bf16), time each method in each, side by side")
    g.add_argument("--checkpoint-dir", help="where the checkpoint is written (default: the system's temp folder)")
    g.add_argument("--pad", choices=("longest", "fixed", "buckets"),
                   help="how batches are padded (pad_to; default: the run's auto, fixed on CUDA, longest on a CPU)")
    g.add_argument("--compile", nargs="?", const=True, default=False, type=compile_mode, metavar="MODE",
                   help="also time each method with its modules compiled (compile=MODE: true when no mode is given; "
                        "reduce-overhead captures the step in CUDA graphs, with --pad fixed), print the payoff")
    g.add_argument("--sync-check", type=int, default=0, metavar="N",
                   help="count the host synchronisations of N more steps (CUDA: set_sync_debug_mode)")
    g.add_argument("--tf32", action="store_true", help="also time each method with TF32 matmuls (CUDA)")
    g.add_argument("--profile", action="store_true", help="print torch.profiler's operator table of one more step")
    g.add_argument("--output", help="write the measurements as JSON (after each method too)")
