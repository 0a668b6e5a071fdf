"""Training throughput on this machine (issue: training engine).

  python bench/train_speed.py [--steps 8] [--batch-size 64]
                              [--methods simcse,diffcse,scd,esimcse,promptbert,consert,diffaug,st] [--eval]
                              [--glibc-default] [--mixed-precision no,bf16]
  python bench/train_speed.py --shape bert-base|roberta-base [--device cuda|cpu] ...   (issue 26: every method at
                              the papers' shape, built from configs; see bench/paper_speed.py)
  python bench/train_speed.py --grad-cache N [--methods ...] [--batches 64,128,512]   (issue 58: gradient caching's
                              peak memory and step time; see bench/grad_cache_speed.py)
  python bench/train_speed.py --st-model FOLDER [--device cuda|cpu] [--batch-size 64] [--mixed-precision bf16]
                              [--steps 8] [--warmup 2] [--pad fixed] [--output result.json]
                              (SimCSE's training step, the loop's own, against sentence-transformers' MNRL on the
                              same model folder, on the device: st_compare)

SimCSE, DiffCSE, SCD and ESimCSE (cpu profile: all-MiniLM-L6-v2, its fitted MLM head as DiffCSE's generator, SCD's
3 x 4096 projector) against sentence-transformers' MultipleNegativesRankingLoss (st) on the same model, batches
(Wiki1M sample, max length 32) and AdamW, in rounds that alternate them, so machine noise hits all alike. Each
method's step is the loop's own (cse_kit.train.step.TrainStep with its preset's optimizer, schedule and clipping,
built by paper_speed.train_step as for --shape: StepTimer), its batch made before the clock starts.
PromptBERT (promptbert: the unsupervised preset, two templates and their denoising rows) and ConSERT (consert: feature
cutoff and shuffle, one pass per view) train on the same sentences. Prints median sentences/s, each method's measured
cost over SimCSE beside its FLOP ratio, and (--eval)
the share of wall time a dev evaluation every 125 steps takes. `--mixed-precision no,bf16` times every method again
under bf16 autocast in the same rounds and prints each one's speed-up beside the bf16/fp32 ratio of the matmul
ceiling measured in the run (`--shape` too: each method in each precision, each beside its dtype's ceiling). DiffAug (diffaug) is timed as its stage-1 step (NLI
triplets through the prefixes, the official clipping over every gradient) and its stage-2 step (semi-supervised, with
template denoising), beside a SimCSE step on the same sentences filled into the prompt template (PromptBERT-style
encoding: about 8 more tokens per sentence); its FLOP ratio to a SimCSE step counts the encoder's matmuls per
position, the denoising rows and the attention to the 2l prefix keys; peak memory is not measured on CPU here.
"""

import argparse
import statistics
from functools import partial
import time
from pathlib import Path

import torch

from cse_kit.environment import keep_freed_memory
from cse_kit.eval import DevEvaluator
from cse_kit.models import load_encoder, resolve_reference
from cse_kit.train import build_config, build_objective
from cse_kit.train.data import Batches, load_examples, tokenize, tokenized_cache_dir
from cse_kit.eval.prompt import Template
from cse_kit.train.optim import build_optimizer, fused_update

import paper_speed  # bench/ (the script's folder)


def _nonembedding_params(model) -> int:
    """Weights outside the input embedding and the vocabulary projection (often the same tied matrix)."""
    vocab = [model.get_input_embeddings().weight]
    if model.get_output_embeddings() is not None:
        vocab.append(model.get_output_embeddings().weight)
    return sum(p.numel() for p in model.parameters() if all(p is not v for v in vocab))


def flop_ratio(diffcse, head_fraction: float) -> float:
    """Per-position matmul FLOPs (2 per weight; backward = 2x forward) of a DiffCSE step over a SimCSE step:
    SimCSE trains the encoder; DiffCSE adds a generator forward (no backward), whose vocabulary-sized projection
    runs on `head_fraction` of the positions (the real tokens after [CLS]), and a discriminator forward and
    backward with the RTD head."""
    enc = _nonembedding_params(diffcse.encoder)
    projection = diffcse.generator.get_output_embeddings().weight.numel()
    gen = _nonembedding_params(diffcse.generator) + head_fraction * projection
    disc = _nonembedding_params(diffcse.discriminator) + diffcse.rtd_head.weight.numel()
    simcse = 3 * 2 * enc
    return (simcse + 2 * gen + 3 * 2 * disc) / simcse


def scd_flop_ratio(scd, simcse, length: int) -> float:
    """Matmul FLOPs (2 per weight; backward = 2x forward) of an SCD step over a SimCSE step on the same N sentences
    padded to `length`: both run the encoder over 2N sequences (SimCSE in one pass over both views, SCD in one pass
    per view); SimCSE adds its d x d MLP on 2N vectors, SCD its projector on 2N vectors and the W x W
    cross-correlation, an (N x W)-by-(N x W) product (2 N W^2 forward, twice that backward)."""
    per_sentence = _nonembedding_params(scd.encoder) * length
    width = scd.bn.num_features
    scd_cost = per_sentence + _linear_params(scd.projector) + width ** 2 / 2
    return scd_cost / (per_sentence + _linear_params(simcse.projector))


def _linear_params(module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))


def esimcse_flop_ratio(width: int, positive_width: int) -> float:
    """Matmul FLOPs of an ESimCSE step over a SimCSE step on the same batch: the online encoder trains on both
    views padded to the repeated view's width, and the momentum encoder runs forward (no backward) on the original
    view only. Per position, forward = 2 FLOPs per weight and backward twice that; the encoder's size cancels. The
    EMA adds 3 FLOPs per parameter once per step, nothing beside the batch's matmuls."""
    simcse = 3 * 2 * width
    return (3 * 2 * positive_width + width) / simcse


def esimcse_parts(esimcse, batch) -> dict:
    """Seconds of ESimCSE's additions on their own: the repetition, the fused EMA (and, for comparison, the same
    update as a Python loop over the tensors), the momentum pass (forward only) with its enqueue."""
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    timed = {}
    t = time.perf_counter()
    pos_ids, _ = esimcse.positive(ids, mask, batch["example_index"])
    timed["repetition"] = time.perf_counter() - t
    t = time.perf_counter()
    esimcse.update_momentum_encoder()
    timed["EMA (fused)"] = time.perf_counter() - t
    t = time.perf_counter()
    with torch.no_grad():
        for p_m, p in zip(esimcse.momentum_encoder.parameters(), esimcse.encoder.parameters()):
            p_m.mul_(esimcse.momentum).add_(p, alpha=1 - esimcse.momentum)
    loop = time.perf_counter() - t
    t = time.perf_counter()
    esimcse.enqueue(esimcse.momentum_embeddings(ids, mask))
    timed["momentum pass"] = time.perf_counter() - t
    return timed, loop, max(ids.shape[1], pos_ids.shape[1])


def promptbert_flop_ratio(promptbert, simcse, plain_width: int, templated_width: int, batch) -> float:
    """Matmul FLOPs of a PromptBERT step over a SimCSE step on the same N sentences: both train the encoder on 2N
    sequences (SimCSE padded to plain_width, PromptBERT to templated_width: the template's tokens replace [CLS] and
    [SEP]) and their d x d MLP on 2N vectors; PromptBERT adds its denoising rows, one empty template per distinct
    sentence length and template, forward and backward, as the encoder's rows. Template 2 differs from template 1 by
    a token at most, so its views are counted at templated_width."""
    lengths = batch["attention_mask"][:, 0].sum(-1)
    rows = 2 * len(lengths)
    denoising = 2 * len(torch.unique(lengths)) * len(promptbert.template)
    prompt = _nonembedding_params(promptbert.encoder) * (rows * templated_width + denoising) \
        + _linear_params(promptbert.mlp) * rows
    plain = _nonembedding_params(simcse.encoder) * rows * plain_width + _linear_params(simcse.projector) * rows
    return prompt / plain


def consert_flop_ratio(consert, simcse, width: int, rows: int) -> float:
    """Matmul FLOPs of a ConSERT step over a SimCSE step on the same N sentences padded to `width`: both run the
    encoder over 2N sequences (ConSERT one pass per view, its augmentations elementwise); SimCSE adds its d x d MLP on
    2N vectors, ConSERT has no projector."""
    encoder = _nonembedding_params(consert.encoder) * width * rows
    return encoder / (encoder + _linear_params(simcse.projector) * rows)


def projected_fraction(batch) -> float:
    """The share of a batch's positions the generator projects onto the vocabulary: real tokens after [CLS]."""
    mask = batch["attention_mask"]
    return ((mask.sum() - mask.shape[0] * mask.shape[1]) / mask.numel()).item()


def diffaug_flop_ratio(diffaug, plain_width: int, templated_width: int, batch, rows: int) -> float:
    """Matmul FLOPs of a DiffAug stage-2 step over a SimCSE step on the same N sentences: both train the encoder on
    2N sequences (SimCSE padded to plain_width, DiffAug to templated_width: the template's tokens replace [CLS] and
    [SEP]); DiffAug adds the denoising rows (one empty template per distinct length and prefix, forward and
    backward) and every position's attention to the 2l prefix keys (scores and values: 4 FLOPs per key and hidden
    unit, per layer); the prefix MLP runs once per step over 2l positions (counted too)."""
    config = diffaug.encoder.config
    per_position = _nonembedding_params(diffaug.encoder)
    lengths = batch["attention_mask"].sum(-1)
    distinct = sum(len(torch.unique(lengths[:, v])) for v in range(lengths.shape[1]))
    prefix_attention = 4 * 2 * diffaug.prefix_len * config.hidden_size * config.num_hidden_layers / 2
    diffaug_positions = rows * templated_width + distinct * len(diffaug.template)
    cost = diffaug_positions * (per_position + prefix_attention) + 2 * diffaug.prefix_len * _linear_params(
        diffaug.prefix_encoder)
    return cost / (rows * plain_width * per_position)


class StepTimer:
    """The loop's own step (cse_kit.train.step.TrainStep, built as the loop builds it: paper_speed.train_step) of
    `objective` under `cfg` in `precision` ("bf16": the forward under bf16 autocast with fp32 weights, and the loop's
    AdamW for it), over `batches` (and `nli_batches`, a first stage's); `timer(i)` times run step i (a two-stage
    method's main stage starts at `timer.step.first_stage`) on its batch, made and copied beforehand
    (TimedStep.prepare), so only the step is timed. Each precision needs an objective of its own: Accelerate wraps a
    prepared module's forward in its autocast."""

    def __init__(self, cfg, objective, batches, precision: str = "no", nli_batches=None):
        self.step = paper_speed.train_step(cfg.replace(mixed_precision=precision), objective, batches, nli_batches,
                                           torch.device("cpu"), batches.steps_per_epoch)

    def __call__(self, step: int) -> float:
        return self.step.timed(step)["step"]


def diffcse_parts(diffcse, batch) -> dict:
    """Seconds of DiffCSE's two additions on their own, in training mode: the generator's edit (forward only)
    and the discriminator's forward and backward (from a leaf sentence vector, so no encoder work is counted)."""
    ids, mask = batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1)
    t = time.perf_counter()
    edited, labels, edited_mask = diffcse.edit(ids, mask)
    t_gen = time.perf_counter() - t
    h = torch.randn(len(ids), diffcse.discriminator.config.hidden_size, requires_grad=True)
    t = time.perf_counter()
    loss, _ = diffcse.rtd_loss(h, edited, labels, edited_mask)
    loss.backward()
    t_disc = time.perf_counter() - t
    diffcse.zero_grad(set_to_none=True)
    return {"generator edit": t_gen, "discriminator fwd+bwd": t_disc}


def sentence_transformers_step(batch_size, lr, device="cpu", model=None, precision: str = "no",
                               max_length: int = 32, scale: float = 20.0, max_grad_norm: float = 1.0):
    """A step of sentence-transformers' MNRL on (x, x) pairs: all-MiniLM-L6-v2 (or the model folder `model`) with
    CLS pooling on `device`, the forward under `precision`'s autocast (a GradScaler under fp16), the kit's AdamW for
    that device and precision (fused on CUDA and in bf16 on a CPU, else _foreach). Returns step(sentences) ->
    seconds (synchronised on CUDA)."""
    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers 6
        from sentence_transformers.sentence_transformer import losses
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:
        from sentence_transformers import losses
        from sentence_transformers.models import Pooling, Transformer

    device = torch.device(device)
    transformer = Transformer(model or resolve_reference("all-MiniLM-L6-v2"), max_seq_length=max_length)
    width = transformer.auto_model.config.hidden_size
    st = SentenceTransformer(modules=[transformer, Pooling(width, pooling_mode="cls")], device=str(device))
    tokenize = getattr(st, "preprocess", None) or st.tokenize  # sentence-transformers 6 renamed it
    mnrl = losses.MultipleNegativesRankingLoss(st, scale=scale)  # scale 1 / temp
    opt = build_optimizer(st.named_parameters(), "torch-adamw", lr, None, fused_update(device.type, precision))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = partial(torch.autocast, device.type, dtype=dtype, enabled=dtype is not None)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    st.train()

    def step(sentences) -> float:
        sync()
        t = time.perf_counter()
        features = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in tokenize(sentences).items()}
                    for _ in range(2)]  # the SimCSE pairing (x, x), each tokenized and copied, as fit's collate
        with autocast():
            loss = mnrl(features, None)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(st.parameters(), max_grad_norm)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t

    return step


def st_compare(args) -> dict:
    """SimCSE's step as `cse-kit train` takes it (the simcse-bert preset on the paper profile around the model in
    folder args.st_model; the loop's TrainStep, bench/paper_speed.train_step, with its batches read, tokenized,
    padded and copied: the data part counted) against sentence-transformers' MultipleNegativesRankingLoss on the
    same folder's weights (CLS pooling, scale 1/temp, each (x, x) pair tokenized twice and copied inside the step,
    as fit's collate does), on the same sentences, precision (autocast; a GradScaler under fp16) and AdamW (fused on
    CUDA, as the kit's), gradient norm clipped to the preset's. Alternating rounds: SimCSE's step, then MNRL's on the
    same sentences, `--warmup` rounds untimed. Prints the medians and the ratio; `--output` writes them as JSON."""
    import json

    from cse_kit.train.step import resolve_padding

    paper_speed.hide_gpu_for_cpu(args.device)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        keep_freed_memory()
    batch_size = args.batch_size or 64
    overrides = {"model": args.st_model, "batch_size": batch_size, "data_dir": args.data_dir}
    if args.mixed_precision:
        overrides["mixed_precision"] = args.mixed_precision[0]
    cfg = build_config("simcse-bert", "paper", overrides)
    torch.manual_seed(0)
    tokenizer, encoder = load_encoder(cfg.model, cfg.dropout)
    objective = build_objective(cfg, tokenizer, encoder)
    args.shape = "bert-base"  # paper_speed.method_batches: bert-base-uncased's ids, as the folder's tokenizer
    padding = resolve_padding(args.pad or cfg.pad_to, device.type == "cuda")
    batches = paper_speed.method_batches(cfg, tokenizer, args, padding=padding)
    kit = paper_speed.train_step(cfg, objective, batches, None, device)
    kit.objective.train()
    mnrl = sentence_transformers_step(batch_size, cfg.lr, device=device, model=args.st_model,
                                      precision=kit.precision, max_length=cfg.max_seq_length, scale=1 / cfg.temp,
                                      max_grad_norm=cfg.max_grad_norm)
    examples = batches.dataset.examples
    times = {"SimCSE": [], "sentence-transformers MNRL": []}
    for i in range(args.warmup + args.steps):
        rows = batches.order(0)[i * batch_size:(i + 1) * batch_size].tolist()
        sentences = [examples[j % len(examples)][0] for j in rows]
        simcse_s = sum(kit.timed(i).values())
        mnrl_s = mnrl(sentences)
        if i >= args.warmup:
            times["SimCSE"].append(simcse_s)
            times["sentence-transformers MNRL"].append(mnrl_s)
    med = {k: statistics.median(v) for k, v in times.items()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"SimCSE (the loop's step, simcse-bert paper preset) vs sentence-transformers MNRL on {args.st_model}, "
          f"{name}, batch {batch_size}, {kit.precision}, padding {padding}, medians of {args.steps} alternating "
          f"rounds after {args.warmup}")
    for k, v in med.items():
        print(f"  {k:28s} {1000 * v:9.1f} ms/step  {batch_size / v:8.1f} sentences/s")
    ratio = med["sentence-transformers MNRL"] / med["SimCSE"]
    print(f"  SimCSE vs sentence-transformers: {ratio:.2f}x as fast")
    result = {"device": str(device), "batch_size": batch_size, "precision": kit.precision, "padding": padding,
              "steps": args.steps, "ms_step": {k: 1000 * v for k, v in med.items()}, "speedup": ratio}
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8, help="timed steps per method (after 2 warm-up steps)")
    p.add_argument("--batch-size", type=int, help="default 64 (--shape: the preset's batch, and its NLI batch)")
    p.add_argument("--methods", help="comma-separated subset of simcse, diffcse, scd, esimcse, promptbert, consert, "
                                     "st (the default; SimCSE is always timed), or diffaug alone; diffcse needs the "
                                     "fitted MLM head (cse-kit fit-mlm-head). --shape: of simcse, diffcse, scd, "
                                     "esimcse, diffaug, promptbert, consert (default: all)")
    p.add_argument("--eval", action="store_true", help="also time one dev evaluation (STS-B dev)")
    p.add_argument("--data-dir")
    p.add_argument("--glibc-default", action="store_true",
                   help="leave malloc as glibc sets it (cse-kit train keeps freed memory, see keep_freed_memory)")
    import speed_report

    paper_speed.add_arguments(p)
    g = p.add_argument_group("gradient caching (issue 58): --grad-cache N (bench/grad_cache_speed.py)")
    g.add_argument("--grad-cache", type=int, help="peak memory and step time at the papers' shape, plain and in "
                                                  "chunks of N rows, at each of --batches")
    g.add_argument("--batches", help="comma-separated batch sizes (default 64,128,512)")
    g.add_argument("--one", help=argparse.SUPPRESS)  # method,batch,chunk: one measurement in this process
    p.add_argument("--st-model", metavar="FOLDER", help="time SimCSE's step against sentence-transformers' MNRL on "
                                                       "this model folder, on --device (st_compare)")
    args = p.parse_args()
    if args.st_model:
        return st_compare(args)
    if args.grad_cache:
        import grad_cache_speed

        return grad_cache_speed.main(args)
    if args.shape:
        return paper_speed.main(args)
    args.batch_size = args.batch_size or 64
    args.methods = args.methods or "simcse,diffcse,scd,esimcse,promptbert,consert,st"
    if "diffaug" in args.methods.split(","):
        return diffaug_main(args)
    if not args.glibc_default:
        keep_freed_memory()  # as `cse-kit train` does on CPU; it applies to every method timed here alike
    chosen = set(args.methods.split(",")) | {"simcse"}
    presets = {"simcse": ("SimCSE", "simcse-bert"), "diffcse": ("DiffCSE", "diffcse-bert-sts"),
               "scd": ("SCD", "scd-bert"), "esimcse": ("ESimCSE", "esimcse-bert"),
               "promptbert": ("PromptBERT", "promptbert-bert"), "consert": ("ConSERT", "consert-bert")}
    cfgs = {name: build_config(preset, "cpu", {"batch_size": args.batch_size, "data_dir": args.data_dir})
            for key, (name, preset) in presets.items() if key in chosen}
    tokenizer = load_encoder(cfgs["SimCSE"].model)[0]  # every cpu-profile preset's: all-MiniLM-L6-v2's

    def objective(cfg):
        torch.manual_seed(0)
        return build_objective(cfg, *load_encoder(cfg.model, cfg.dropout))

    objectives = {name: objective(cfg) for name, cfg in cfgs.items()}
    corpus = load_examples("Wiki1M-sample", args.data_dir)
    dataset = tokenize(corpus, tokenizer, 32, tokenized_cache_dir(args.data_dir))
    batches = Batches(dataset, args.batch_size, 0, tokenizer.pad_token_id)
    # a prompt method's batches: the same sentences (the same order: same seed and size), filled into its template
    templated = {name: Batches(tokenize(corpus, tokenizer, 32, tokenized_cache_dir(args.data_dir),
                                        Template(tokenizer, cfg.template)), args.batch_size, 0, tokenizer.pad_token_id)
                 for name, cfg in cfgs.items() if cfg.template}
    texts = [ex[0] for ex in load_examples("Wiki1M-sample", args.data_dir)]
    order = batches.order(0)
    steps = {name: StepTimer(cfgs[name], obj, templated.get(name, batches)) for name, obj in objectives.items()}
    # each further precision (--mixed-precision no,bf16): each method again (its own copy, as initialised), timed in
    # it in the same rounds
    extra = [p for p in dict.fromkeys(args.mixed_precision or ["no"]) if p != "no"]
    steps.update({f"{name} {p}": StepTimer(cfg, objective(cfg), templated.get(name, batches), p)
                  for p in extra for name, cfg in cfgs.items()})
    if "st" in chosen:
        st_step = sentence_transformers_step(args.batch_size, 3e-5)
        steps["sentence-transformers MNRL"] = lambda i: st_step(
            [texts[j] for j in order[i * args.batch_size:(i + 1) * args.batch_size].tolist()])
    times = {name: [] for name in steps}
    fractions, parts, lengths, esimcse_timed, loops, widths, prompt_ratios = [], [], [], [], [], [], []
    for i in range(args.steps + 2):
        batch = batches(i)
        measured = {name: step(i) for name, step in steps.items()}
        if i >= 2:
            if "PromptBERT" in objectives:
                prompted = templated["PromptBERT"](i)
                prompt_ratios.append(promptbert_flop_ratio(objectives["PromptBERT"], objectives["SimCSE"],
                                                           batch["input_ids"].shape[-1],
                                                           prompted["input_ids"].shape[-1], prompted))
            fractions.append(projected_fraction(batch))
            lengths.append(batch["input_ids"].shape[-1])
            if "DiffCSE" in objectives:
                parts.append(diffcse_parts(objectives["DiffCSE"], batch))
            if "ESimCSE" in objectives:
                timed, loop, width = esimcse_parts(objectives["ESimCSE"], batch)
                esimcse_timed.append(timed)
                loops.append(loop)
                widths.append(esimcse_flop_ratio(batch["input_ids"].shape[-1], width))
            for k, v in measured.items():
                times[k].append(v)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"training throughput, all-MiniLM-L6-v2, batch {args.batch_size}, max length 32, "
          f"{torch.get_num_threads()} threads, median of {args.steps} steps, "
          f"malloc {'glibc default' if args.glibc_default else 'keeping freed memory'}")
    for k, v in med.items():
        print(f"  {k:28s} {args.batch_size / v:7.1f} sentences/s  ({v:.3f} s/step)")
    for p in extra:
        ceilings = {dtype: speed_report.matmul_ceiling(dtype, torch.device("cpu"))
                    for dtype in (torch.float32, torch.bfloat16)}
        print(f"  matmul ceiling measured now (2048³): fp32 {ceilings[torch.float32]:.3f} TFLOP/s, {p} "
              f"{ceilings[torch.bfloat16]:.3f} ({ceilings[torch.bfloat16] / ceilings[torch.float32]:.2f}x)")
        print("  " + ", ".join(f"{name} {med[name] / med[f'{name} {p}']:.2f}x" for name in objectives)
              + f": {p} step speed-up over fp32, measured in the same rounds")
    if "sentence-transformers MNRL" in med:
        print(f"  SimCSE vs sentence-transformers: {med['sentence-transformers MNRL'] / med['SimCSE']:.2f}x as fast")
    if "DiffCSE" in med:
        print(f"  DiffCSE / SimCSE step time: measured {med['DiffCSE'] / med['SimCSE']:.2f}x, "
              f"FLOP ratio {flop_ratio(objectives['DiffCSE'], statistics.mean(fractions)):.2f}x "
              f"(generator projection on {100 * statistics.mean(fractions):.0f}% of positions)")
        part = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
        print("  DiffCSE's additions timed on their own: " + ", ".join(f"{k} {v:.3f} s" for k, v in part.items())
              + f"; SimCSE step + these = {(med['SimCSE'] + sum(part.values())) / med['SimCSE']:.2f}x a SimCSE step")
    if "SCD" in med:
        length = statistics.mean(lengths)
        print(f"  SCD / SimCSE step time: measured {med['SCD'] / med['SimCSE']:.2f}x, FLOP ratio "
              f"{scd_flop_ratio(objectives['SCD'], objectives['SimCSE'], length):.2f}x (batches padded to "
              f"{length:.0f} tokens on average; the optimizer update of the projector's "
              f"{_linear_params(objectives['SCD'].projector) / 1e6:.1f} M weights is not counted)")
    if "ESimCSE" in med:
        print(f"  ESimCSE / SimCSE step time: measured {med['ESimCSE'] / med['SimCSE']:.2f}x, "
              f"FLOP ratio {statistics.mean(widths):.2f}x (repeated view widens the padded batch; momentum pass on x)")
        part = {k: statistics.median(p[k] for p in esimcse_timed) for k in esimcse_timed[0]}
        print("  ESimCSE's additions timed on their own: " + ", ".join(f"{k} {v:.4f} s" for k, v in part.items())
              + f"; the EMA as a Python loop over tensors {statistics.median(loops):.4f} s")
    if "PromptBERT" in med:
        ratio = statistics.mean(prompt_ratios)
        print(f"  PromptBERT / SimCSE step time: measured {med['PromptBERT'] / med['SimCSE']:.2f}x, FLOP ratio "
              f"{ratio:.2f}x (templated inputs and the denoising rows; "
              f"{med['PromptBERT'] / med['SimCSE'] / ratio:.2f}x the FLOP ratio)")
    if "ConSERT" in med:
        ratio = consert_flop_ratio(objectives["ConSERT"], objectives["SimCSE"], statistics.mean(lengths),
                                   2 * args.batch_size)
        print(f"  ConSERT / SimCSE step time: measured {med['ConSERT'] / med['SimCSE']:.2f}x, FLOP ratio "
              f"{ratio:.2f}x (one encoder pass per view, no projector; "
              f"{med['ConSERT'] / med['SimCSE'] / ratio:.2f}x the FLOP ratio)")
    if args.eval:
        dev = DevEvaluator(tokenizer, "cls_before_pooler", args.data_dir)
        calls = [dev(objectives["SimCSE"].encoder)["seconds"] for _ in range(2)]
        e = statistics.median(calls)
        for k in objectives:
            share = e / (e + 125 * med[k])
            print(f"  dev evaluation every 125 steps, {k}: {e:.1f} s per call = {100 * share:.1f}% of wall time")


def diffaug_main(args) -> None:
    """DiffAug's two steps beside SimCSE's, plain and on templated sentences, in alternating rounds."""
    if not args.glibc_default:
        keep_freed_memory()
    simcse_cfg = build_config("simcse-bert", "cpu", {"batch_size": args.batch_size, "data_dir": args.data_dir})
    cfg = build_config("diffaug-semi-bert-official", "cpu", {"batch_size": args.batch_size, "data_dir": args.data_dir,
                                                             "mixed_precision": "no"})
    torch.manual_seed(0)
    tokenizer, encoder = load_encoder(cfg.model)
    diffaug = build_objective(cfg, tokenizer, encoder)
    simcse = build_objective(simcse_cfg, *load_encoder(simcse_cfg.model))
    templated_simcse = build_objective(simcse_cfg, *load_encoder(simcse_cfg.model))
    template = Template(tokenizer, cfg.template)
    cache = tokenized_cache_dir(args.data_dir)
    corpus = load_examples("Wiki1M-sample", args.data_dir)
    plain = Batches(tokenize(corpus, tokenizer, 32, cache), args.batch_size, 0, tokenizer.pad_token_id)
    prompted = Batches(tokenize(corpus, tokenizer, 32, cache, template), args.batch_size, 0, tokenizer.pad_token_id)
    nli = Batches(tokenize(load_examples(cfg.nli_data, args.data_dir), tokenizer, 32, cache, template),
                  args.batch_size, 0, tokenizer.pad_token_id)
    diffaug_step = StepTimer(cfg, diffaug, prompted, nli_batches=nli)  # its two stages, each with its optimizer
    stage1, stage2 = diffaug_step, lambda i: diffaug_step(diffaug_step.step.first_stage + i)
    steps = {"SimCSE": StepTimer(simcse_cfg, simcse, plain),
             "SimCSE, templated input": StepTimer(simcse_cfg, templated_simcse, prompted),
             "DiffAug stage 1": stage1, "DiffAug stage 2": stage2}
    times, ratios = {k: [] for k in steps}, []
    for i in range(args.steps + 2):
        plain_batch, prompted_batch = plain(i), prompted(i)
        measured = {name: step(i) for name, step in steps.items()}
        if i >= 2:
            for k, v in measured.items():
                times[k].append(v)
            ratios.append(diffaug_flop_ratio(diffaug, plain_batch["input_ids"].shape[-1],
                                             prompted_batch["input_ids"].shape[-1], prompted_batch,
                                             2 * args.batch_size))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"DiffAug training step, all-MiniLM-L6-v2 (cpu profile), batch {args.batch_size} (stage 1: "
          f"{args.batch_size} NLI triplets), {torch.get_num_threads()} threads, median of {args.steps} steps")
    for k, v in med.items():
        print(f"  {k:28s} {args.batch_size / v:7.1f} sentences/s  ({v:.3f} s/step)")
    ratio = statistics.mean(ratios)
    measured = med["DiffAug stage 2"] / med["SimCSE"]
    print(f"  DiffAug stage 2 / SimCSE step time: measured {measured:.2f}x, FLOP ratio {ratio:.2f}x "
          f"({measured / ratio:.2f}x the FLOP ratio; target <= 1.1x)")
    print(f"  templated SimCSE / SimCSE: {med['SimCSE, templated input'] / med['SimCSE']:.2f}x; DiffAug stage 2 / "
          f"templated SimCSE: {med['DiffAug stage 2'] / med['SimCSE, templated input']:.2f}x")
    print(f"  DiffAug stage 1 / SimCSE step time: {med['DiffAug stage 1'] / med['SimCSE']:.2f}x (3 sentences per row, "
          "encoder gradients computed for the official clipping)")


if __name__ == "__main__":
    main()
