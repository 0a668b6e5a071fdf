"""The official-code variants train as the official code did: its optimizer (the legacy transformers AdamW, through
the Hugging Face Trainer or SentenceTransformer.fit) and its run's process count (the gradient DDP gave it), while
the paper variants keep the kit's torch AdamW and global-batch gradient.

Restated here, without calling the kit's code under test:
  * transformers-4.2.1 src/transformers/optimization.py:320-366 (vendored in voidism/DiffCSE@f724b2c): AdamW.step,
    eps added to sqrt(v) before the bias correction, weight decay after the update;
  * SimCSE simcse/models.py:171-189 (Prompt-BERT and DiffAug copy it): each process all_gathers the others' vectors
    without gradient and puts its own back with gradient, computes the whole loss; DDP averages the parameter
    gradients over the processes; DiffAug's auxiliary cross-entropy is each process's mean over its own NLI rows
    (diffaug/models.py:338-349)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cse_kit.eval.encode import pad_ids
from cse_kit.methods.diffaug import DiffAug
from cse_kit.methods.grad_cache import backward_with, cached_step
from cse_kit.methods.simcse import SimCSE
from cse_kit.methods.promptbert import PromptBERT
from cse_kit.models import build_smoke_model
from cse_kit.eval.prompt import Template
from cse_kit.train.config import OFFICIAL_OPTIMIZERS
from cse_kit.train.method_settings import variant_field
from cse_kit.train.optim import LegacyAdamW, build_optimizer
from cse_kit.train.presets import OFFICIAL_RUNS, PRESETS, build_config, official_run, variant_of

from conftest import SAME_ARITHMETIC, agrees, rerandomize

# --------------------------------------------------------------------------------------------------------------
# 1. the legacy AdamW
# --------------------------------------------------------------------------------------------------------------


def legacy_adamw_restated(p, grads, lr, betas, eps, weight_decay, correct_bias):
    """transformers.optimization.AdamW.step, element by element in float64 Python, over the steps' gradients."""
    b1, b2 = betas
    p, m, v = list(map(float, p)), [0.0] * len(p), [0.0] * len(p)
    for t, g in enumerate(grads, start=1):
        for i, gi in enumerate(map(float, g)):
            m[i] = m[i] * b1 + (1 - b1) * gi
            v[i] = v[i] * b2 + (1 - b2) * gi * gi
            size = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) if correct_bias else lr
            p[i] = p[i] - size * m[i] / (math.sqrt(v[i]) + eps)
            p[i] = p[i] - lr * weight_decay * p[i]
    return torch.tensor(p, dtype=torch.float64)


def _gradients(steps=6, size=5):
    """Gradients of every size: ordinary ones, and ones of 1e-9 to 1e-7 where sqrt(v) is near eps."""
    g = torch.Generator().manual_seed(3)
    scales = torch.tensor([1.0, 1e-3, 1e-7, 3e-8, 1e-9][:size], dtype=torch.float64)
    return [torch.randn(size, generator=g, dtype=torch.float64) * scales for _ in range(steps)]


@pytest.mark.parametrize("correct_bias,eps,weight_decay", [(True, 1e-8, 0.0), (False, 1e-6, 0.01), (True, 1e-8, 0.1)])
def test_legacy_adamw_equals_the_transformers_formula_over_six_steps(correct_bias, eps, weight_decay):
    grads = _gradients()
    start = torch.linspace(-1, 1, 5, dtype=torch.float64)
    p = torch.nn.Parameter(start.clone())
    opt = LegacyAdamW([p], lr=1e-3, eps=eps, weight_decay=weight_decay, correct_bias=correct_bias)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    want = legacy_adamw_restated(start, grads, 1e-3, (0.9, 0.999), eps, weight_decay, correct_bias)
    assert torch.allclose(p.detach(), want, rtol=0, atol=1e-15)
    if not correct_bias or weight_decay:
        return
    # the small gradients are where eps placement matters: torch's AdamW moves them elsewhere
    q = torch.nn.Parameter(start.clone())
    torch_opt = torch.optim.AdamW([q], lr=1e-3, eps=eps, weight_decay=weight_decay)
    for g in grads:
        q.grad = g.clone()
        torch_opt.step()
    moved_legacy, moved_torch = (p.detach() - start).abs(), (q.detach() - start).abs()
    assert torch.allclose(moved_legacy[:2], moved_torch[:2], rtol=2e-2)  # ordinary gradients: about the same
    assert (moved_legacy[3:] < 0.5 * moved_torch[3:]).all()  # gradients below eps: the legacy step is smaller


def test_a_parameter_without_gradient_keeps_its_own_step_count():
    a, b = torch.nn.Parameter(torch.ones(2, dtype=torch.float64)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt = LegacyAdamW([a, b], lr=0.1)
    grads = _gradients(steps=3, size=2)
    for i, g in enumerate(grads):
        a.grad, b.grad = g.clone(), (g.clone() if i == 2 else None)
        opt.step()
    assert opt.state[a]["step"] == 3 and opt.state[b]["step"] == 1
    want_b = legacy_adamw_restated(torch.ones(2), grads[2:], 0.1, (0.9, 0.999), 1e-6, 0.0, True)
    assert torch.allclose(b.detach(), want_b, rtol=0, atol=1e-15)


def _named_bert():
    _, encoder = build_smoke_model("smoke-bert", num_hidden_layers=1)
    return list(encoder.named_parameters())


def test_sentence_transformers_fit_groups_eps_and_no_bias_correction():
    """SentenceTransformer.fit (ConSERT sentence_transformers/SentenceTransformer.py:459-461, 531-539; main.py:291):
    weight decay 0.01 except names holding 'bias', 'LayerNorm.bias', 'LayerNorm.weight'; eps 1e-6; no correction."""
    named = _named_bert()
    opt = build_optimizer(named, "sentence-transformers", lr=2e-5)
    assert isinstance(opt, LegacyAdamW)
    decayed, undecayed = ({id(p) for p in g["params"]} for g in opt.param_groups)
    for name, p in named:
        no_decay = any(part in name for part in ("bias", "LayerNorm.bias", "LayerNorm.weight"))
        assert (id(p) in undecayed) == no_decay and (id(p) in decayed) != no_decay, name
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert all(g["eps"] == 1e-6 and g["correct_bias"] is False and g["lr"] == 2e-5 for g in opt.param_groups)
    hf = build_optimizer(named, "hf-trainer", lr=3e-5)  # TrainingArguments: adam_epsilon 1e-8, weight_decay 0
    assert all(g["eps"] == 1e-8 and g["correct_bias"] and g["weight_decay"] == 0 for g in hf.param_groups)


def test_the_kits_optimizer_is_torchs_adamw_as_before():
    """The paper variants' optimizer: torch.optim.AdamW(params, lr, weight_decay=0), five steps bitwise equal."""
    named = _named_bert()
    grads = [[torch.randn_like(p) * 10.0 ** -k for _, p in named] for k in range(5)]
    weights = []
    for make in (lambda ps: build_optimizer([(n, p) for (n, _), p in zip(named, ps)], "torch-adamw", 3e-5),
                 lambda ps: torch.optim.AdamW(ps, lr=3e-5, weight_decay=0.0)):
        params = [torch.nn.Parameter(p.detach().clone()) for _, p in named]
        opt = make(params)
        assert type(opt) is torch.optim.AdamW and len(opt.param_groups) == 1
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
        weights.append(params)
    assert all(torch.equal(a, b) for a, b in zip(*weights))


# --------------------------------------------------------------------------------------------------------------
# 2. which variant steps with what, and what a run prints
# --------------------------------------------------------------------------------------------------------------

def _variants(preset):
    field = variant_field(PRESETS[preset][1]["method"])
    return field, ("official-code", "paper-text" if field == "variant" else "paper")


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_presets_official_variant_steps_as_the_official_run_and_its_paper_variant_as_the_kit(preset):
    field, (official, paper) = _variants(preset)
    cfg = None
    try:
        cfg = build_config(preset, "paper", [f"{field}={official}"])
    except ValueError as e:  # a preset with no official recipe says so
        assert preset in ("scd-roberta",) and "no official-code recipe" in str(e)
    if cfg is not None:
        assert cfg.optimizer_name() == OFFICIAL_OPTIMIZERS[cfg.method]
        script, processes = OFFICIAL_RUNS.get(preset, ("no official script behind this configuration", 1))
        assert cfg.official_processes == processes
        line = official_run(cfg)
        assert script in line and f"{processes} official process" in line and cfg.optimizer_name() in line
    base = build_config(preset, "paper", [f"{field}={paper}"])
    assert (base.optimizer_name(), base.weight_decay_value(), base.official_processes) == ("torch-adamw", 0.0, 1)
    assert official_run(base) is None


def test_the_published_runs_process_counts():
    """DiffAug run_semi_sup_bert.sh:9 (2), Prompt-BERT run.sh:110, :126 and SimCSE run_sup_example.sh:18 (4)."""
    counts = {name: build_config(name, "paper", [f"{_variants(name)[0]}=official-code"]).official_processes
              for name in ("diffaug-semi-aux-bert-official", "diffaug-sup-bert-official", "promptbert-sup-bert",
                           "promptroberta-sup-roberta", "promptbert-bert", "simcse-sup-bert", "simcse-bert")}
    assert counts == {"diffaug-semi-aux-bert-official": 2, "diffaug-sup-bert-official": 1, "promptbert-sup-bert": 4,
                      "promptroberta-sup-roberta": 4, "promptbert-bert": 1, "simcse-sup-bert": 4, "simcse-bert": 1}
    assert variant_of(PRESETS["diffaug-semi-aux-bert-official"][1]) == "official-code"


def test_an_official_run_prints_the_run_it_reproduces_first(data_dir, tmp_path, capsys):
    from cse_kit.train.loop import train

    cfg = build_config("simcse-sup-bert", "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir),
                                                    "simcse_variant": "official-code", "max_steps": 1,
                                                    "eval_steps": 100, "max_examples": 32})
    train(cfg, progress=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("simcse (simcse-sup-bert, smoke profile)")
    assert lines[1].startswith("simcse_variant=official-code: reproduces princeton-nlp/SimCSE@49fa580 "
                               "run_sup_example.sh") and "4 official processes" in lines[1]
    assert "optimizer hf-trainer: transformers.optimization.AdamW" in lines[1]


# --------------------------------------------------------------------------------------------------------------
# 3. the official run's process count: DDP's arithmetic restated, against the kit on 1 and 2 processes
# --------------------------------------------------------------------------------------------------------------

SENTENCES = ["A man is playing a guitar.", "The cat sleeps.", "Two dogs run through the deep snow.", "Rain.",
             "She said no twice.", "A child eats an apple.", "The train is late again.", "Birds sing."]
NLI = [("A woman is slicing an onion.", "Someone cuts a vegetable.", "The woman is asleep."),
       ("Kids play soccer in a park.", "Children are outside.", "The kids are in a classroom."),
       ("A dog barks.", "An animal makes noise.", "A cat sleeps quietly."),
       ("A man rides a bike.", "A person is cycling.", "A man is swimming."),
       ("Two women talk.", "People are speaking.", "Nobody says anything."),
       ("The sun is up.", "It is daytime.", "It is midnight."),
       ("A boy jumps.", "A child is in the air.", "A boy sits still."),
       ("A chef cooks.", "Food is being made.", "The kitchen is empty.")]
AUX = 0.1  # large enough that the cross-entropy's share of the gradient shows
TEMP = 0.5  # 0.05 saturates the loss on these few rows (a gradient 2e3 times smaller than the cross-entropy's)


def _batch(tokenizer, template, columns):
    rows = [[template.wrap_ids(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in col] for col in columns]
    ids, mask = pad_ids([r for col in rows for r in col], tokenizer.pad_token_id)
    views, total = len(columns), len(columns[0])
    return ids.view(views, total, -1).transpose(0, 1), mask.view(views, total, -1).transpose(0, 1)


def objectives():
    """(DiffAug semi-supervised with the auxiliary loss, official run on 2 processes; supervised PromptBERT, official
    run on 4), float64, eval mode, the same weights in every process; and their full batches."""
    tokenizer, encoder = build_smoke_model("smoke-bert", num_hidden_layers=2)
    rerandomize(encoder, 1, 0.25)
    torch.manual_seed(0)
    diffaug = DiffAug(encoder.double(), tokenizer, prefix_len=2, temp=TEMP, aux_weight=AUX,
                      denoise_offset="sentence+prefix", official_processes=2).double().eval()
    for i, part in enumerate((diffaug.prefix_encoder, diffaug.mlp, diffaug.classifier)):
        rerandomize(part, 10 + i, 0.4)
    _, encoder2 = build_smoke_model("smoke-bert", num_hidden_layers=2)
    rerandomize(encoder2, 2, 0.25)
    promptbert = PromptBERT(encoder2.double(), tokenizer, temp=TEMP, mlp=True, denoise_positions="from-zero",
                            official_processes=4).double().eval()
    rerandomize(promptbert.mlp, 20, 0.4)
    template = Template(tokenizer)
    ids, mask = _batch(tokenizer, template, [SENTENCES[:4], SENTENCES[:4]])
    nli_ids, nli_mask = _batch(tokenizer, template, [list(c) for c in zip(*NLI[:4])])
    sup_ids, sup_mask = _batch(tokenizer, template, [list(c) for c in zip(*NLI)])
    return ((diffaug, {"input_ids": ids, "attention_mask": mask, "nli_input_ids": nli_ids,
                       "nli_attention_mask": nli_mask}),
            (promptbert, {"input_ids": sup_ids, "attention_mask": sup_mask}))


def _rows(batch, rank, world):
    return {k: v.chunk(world)[rank] for k, v in batch.items()}


def _grads(model):
    return torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
                      for p in model.parameters()])


def _kit_gradient(model, batch, rank=0, world=1):
    """The kit's gradient on this process's share of the batch, averaged over the processes as DDP does."""
    model.zero_grad(set_to_none=True)
    model(_rows(batch, rank, world))["loss"].backward()
    grad = _grads(model)
    if world > 1:
        torch.distributed.all_reduce(grad)
        grad /= world
    return grad


def _info_nce(z1, z2, temp, z3=None):
    logits = F.normalize(z1, dim=-1) @ F.normalize(z2, dim=-1).T
    if z3 is not None:
        logits = torch.cat([logits, F.normalize(z1, dim=-1) @ F.normalize(z3, dim=-1).T], 1)
    return F.cross_entropy(logits / temp, torch.arange(len(z1)))


def _official_gradient(model, batch, processes, vectors, aux=None):
    """DDP over `processes` official processes: process r holds rows r of the batch, computes the loss over the
    gathered vectors with gradient through its own rows only (+ its own auxiliary cross-entropy), and the
    parameters' gradients are averaged."""
    total = 0
    for r in range(processes):
        model.zero_grad(set_to_none=True)
        z = vectors(batch)
        parts = z.chunk(processes)
        z = torch.cat([part if k == r else part.detach() for k, part in enumerate(parts)])
        loss = _info_nce(z[:, 0], z[:, 1], model.temp, z[:, 2] if z.shape[1] == 3 else None)
        if aux is not None:
            loss = loss + AUX * aux(_rows(batch, r, processes))
        loss.backward()
        total = total + _grads(model)
    return total / processes


def _diffaug_vectors(model, batch):
    pooled = model.encode(batch["input_ids"], batch["attention_mask"])
    return model.mlp(model.denoised(pooled, batch["attention_mask"]))


def official_gradients(pair):
    (diffaug, semi), (promptbert, sup) = pair
    return (_official_gradient(diffaug, semi, 2, lambda b: _diffaug_vectors(diffaug, b), diffaug.stage1_loss),
            _official_gradient(promptbert, sup, 4, lambda b: promptbert.vectors(b["input_ids"], b["attention_mask"])))


def _ddp_worker(rank, world, store, out):
    torch.set_num_threads(1)  # two processes on the CPU cores
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        grads = [_kit_gradient(model, batch, rank, world) for model, batch in objectives()]
        if rank == 0:
            torch.save(grads, out)
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def official():
    pair = objectives()
    return pair, official_gradients(pair)


def _close(got, want, what):
    """To float32 precision: the kit's cross-entropies read float32 logits (as the official --fp16 runs)."""
    rel = float((got - want).norm() / want.norm())
    assert rel < 2e-6, f"{what}: relative difference {rel:.2e}"


def test_on_one_process_the_step_is_the_official_runs(official):
    pair, (want_diffaug, want_promptbert) = official
    (diffaug, semi), (promptbert, sup) = pair
    _close(_kit_gradient(diffaug, semi), want_diffaug, "DiffAug semi-aux, official 2 processes")
    _close(_kit_gradient(promptbert, sup), want_promptbert, "PromptBERT supervised, official 4 processes")
    # what the scale changes: the global batch's gradient is not the official one
    diffaug.official_processes = promptbert.official_processes = 1
    try:
        whole_diffaug, whole_promptbert = _kit_gradient(diffaug, semi), _kit_gradient(promptbert, sup)
    finally:
        diffaug.official_processes, promptbert.official_processes = 2, 4
    assert (whole_diffaug - want_diffaug).norm() > 0.2 * want_diffaug.norm()
    _close(whole_promptbert / 4, want_promptbert, "PromptBERT: a quarter of the global gradient")


def _cached_kit_gradient(model, batch, chunk):
    """The kit's gradient on one process with gradient caching, `chunk` rows at a time (issue 58)."""
    model.zero_grad(set_to_none=True)
    cached_step(model, batch, chunk, backward_with(None))
    return _grads(model)


def test_one_cached_process_steps_as_the_official_multi_process_runs(official):
    """The papers' batch on one small device: gradient caching on 1 process gives the official N-process update
    (DiffAug semi-aux on 2, PromptBERT and SimCSE supervised on 4: run_sup_example.sh), in chunks that divide the
    batch and chunks that do not."""
    pair, (want_diffaug, want_promptbert) = official
    (diffaug, semi), (promptbert, sup) = pair
    tokenizer, encoder = build_smoke_model("smoke-bert", num_hidden_layers=2)
    rerandomize(encoder, 3, 0.25)
    simcse = SimCSE(encoder.double(), temp=TEMP, official_processes=4).double().eval()
    rerandomize(simcse.projector, 30, 0.4)
    columns = [tokenizer(list(c), padding="max_length", max_length=16, return_tensors="pt") for c in zip(*NLI)]
    triplets = {k: torch.stack([c[k] for c in columns], 1) for k in ("input_ids", "attention_mask")}
    want_simcse = _official_gradient(simcse, triplets, 4, simcse.embed)
    for chunk in (2, 3):
        _close(_cached_kit_gradient(diffaug, semi, chunk), want_diffaug, f"DiffAug semi-aux, chunks of {chunk}")
        _close(_cached_kit_gradient(promptbert, sup, chunk), want_promptbert, f"PromptBERT sup, chunks of {chunk}")
        _close(_cached_kit_gradient(simcse, triplets, chunk), want_simcse, f"SimCSE sup, chunks of {chunk}")


@pytest.mark.slow  # two spawned gloo processes importing the kit: 53 CPU-seconds
def test_on_two_processes_the_step_is_the_official_runs(official, tmp_path):
    _, (want_diffaug, want_promptbert) = official
    out = tmp_path / "grads.pt"
    torch.multiprocessing.spawn(_ddp_worker, args=(2, str(tmp_path / "store"), str(out)), nprocs=2)
    got_diffaug, got_promptbert = torch.load(out)
    _close(got_diffaug, want_diffaug, "DiffAug semi-aux on 2 processes")
    _close(got_promptbert, want_promptbert, "PromptBERT supervised on 2 processes")


# --------------------------------------------------------------------------------------------------------------
# 4. ConSERT's official pipeline: its dev vector, its test-time length, its own unsupervised recipe
# --------------------------------------------------------------------------------------------------------------

#: 95 sub-words with the smoke tokenizer, beyond what ConSERT's saved max_seq_length 64 keeps
LONG = ("The committee, after three long days of hearings in the crowded and overheated chamber, finally agreed that "
        "the proposed regulations on river pollution, industrial waste and agricultural runoff would need to be "
        "rewritten entirely before any vote could take place, while several members insisted that the public "
        "should be consulted again in every affected town and village along the valley.")


def sentence_transformers_vector(model, tokenizer, sentence, max_seq_length=64):
    """ConSERT eval.py:27-31 with --last2avg on one sentence: Transformer.get_sentence_features (Transformer.py:88-91:
    the sub-words cut at min(longest, max_seq_length) + 3 tokens with [CLS] and [SEP]) and Pooling's
    mean_last_2_tokens (Pooling.py:80-101): the mean over the tokens of the average of the last two layers."""
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(sentence))
    keep = min(len(ids), max_seq_length) + 3 - 2
    ids = torch.tensor([[tokenizer.cls_token_id, *ids[:keep], tokenizer.sep_token_id]])
    with torch.no_grad():
        layers = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True).hidden_states
    return ((layers[-1] + layers[-2]) / 2).mean(1)[0]


def _consert_run(data_dir, tmp_path, variant, **changes):
    from cse_kit.train.loop import train

    cfg = build_config("consert-bert", "smoke", {"output_dir": str(tmp_path / variant), "data_dir": str(data_dir),
                                                 "consert_variant": variant, "max_examples": 32, "max_steps": 2,
                                                 "eval_steps": 2, "log_steps": 1, **changes})
    return cfg, train(cfg, progress=False)


def test_consert_official_code_selects_on_the_last_layers_mean_and_cuts_test_sentences(data_dir, tmp_path,
                                                                                       monkeypatch, capsys):
    import json
    from pathlib import Path

    from cse_kit import cli
    from cse_kit.cli import eval as eval_command
    from cse_kit.eval.dev import DevEvaluator
    from cse_kit.models import load_encoder

    cfg, summary = _consert_run(data_dir, tmp_path, "official-code")
    model_dir = Path(summary["model"])
    meta = json.loads((model_dir / "cse_kit.json").read_text())
    assert (meta["pooler"], meta["max_length"]) == ("avg_top2", cfg.max_seq_length) == ("avg_top2", 67)
    tokenizer, model = load_encoder(str(model_dir))
    dev = [json.loads(x)["dev"] for x in (model_dir.parent / "log.jsonl").read_text().splitlines() if '"dev"' in x]
    last_layer = DevEvaluator(tokenizer, "avg", data_dir, max_length=67)(model)["stsb_spearman"]
    test_vector = DevEvaluator(tokenizer, "avg_top2", data_dir)(model)["stsb_spearman"]
    # training's dev evaluation, on the weights it exported, in this process
    assert dev[-1]["stsb_spearman"] == agrees(last_layer, SAME_ARITHMETIC) and abs(last_layer - test_vector) > 1e-4
    # cse-kit eval --model <run> applies the saved length with no flag: the official eval.py's vector
    built = []

    def evaluate(encoder, *args, **kwargs):
        built.append(encoder)
        return {"sts": {}, "transfer": {}}

    # where `cse-kit eval` looks them up (its module imports them by name, once, whichever test imports it first)
    monkeypatch.setattr(eval_command, "evaluate", evaluate)
    monkeypatch.setattr(eval_command, "format_tables", lambda result: "")
    assert cli.main(["eval", "--model", str(model_dir), "--tasks", "sts", "--data-dir", str(data_dir)]) == 0
    assert "sentences cut at 67 tokens" in capsys.readouterr().out
    encoder = built[0]
    assert len(tokenizer.tokenize(LONG)) > 66
    got = torch.as_tensor(encoder.encode([LONG])[0], dtype=torch.float32)
    want = sentence_transformers_vector(encoder.model, tokenizer, LONG)
    whole = sentence_transformers_vector(encoder.model, tokenizer, LONG, max_seq_length=512)
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, whole, atol=1e-3)


def test_consert_paper_variant_evaluates_as_before():
    from cse_kit.methods.consert import ConSERT

    _, encoder = build_smoke_model("smoke-bert", num_hidden_layers=1)
    paper = ConSERT.from_config(build_config("consert-bert", "smoke", ["consert_variant=paper"]), None, encoder)
    official = ConSERT.from_config(build_config("consert-bert", "smoke"), None, encoder)
    assert (paper.dev_pooler, paper.test_max_length) == ("avg_top2", None)
    assert (official.dev_pooler, official.test_max_length) == ("avg", 67)


def test_consert_own_recipe_trains_on_every_sts_and_sick_text(data_dir):
    """unsup-consert-base.sh's --train_data stssick: 89,192 sentences (data_utils.py:203-219), the STS15-16 pairs
    without a gold score included (SentEval's STS loader drops them)."""
    from cse_kit.data import load_sts
    from cse_kit.train.data import load_examples

    texts = load_examples("STS-texts", data_dir)
    assert len(texts) == 89192
    scored = sum(len(load_sts(n, data_dir=data_dir)) for n in ("STS12", "STS13", "STS14", "STS15", "STS16"))
    assert scored == 12544 and len(texts) - 2 * scored == 2 * (8628 + 9927) + 2 * 13497
    cfg = build_config("consert-bert-sts", "paper")
    assert (cfg.data, cfg.epochs, cfg.batch_size, cfg.lr, cfg.warmup_steps, cfg.eval_steps) == \
        ("STS-texts", 10, 96, 5e-7, 930, 200)
    assert (cfg.early_stopping_patience, cfg.eval_epoch_end, cfg.dropout) == (10, True, 0.0)
    large = build_config("consert-bert-large-sts", "paper")
    assert (large.model, large.epochs, large.eval_steps, large.warmup_steps, large.dropout) == \
        ("bert-large-uncased", 25, 100, 2323, None)
    assert (large.consert_aug1, large.consert_aug2) == ("none", "shuffle")
    assert build_config("consert-bert-sts", "smoke").data == "STS-texts"


def test_early_stopping_counts_evaluations_of_each_epoch_and_its_end(data_dir, tmp_path):
    """fit's schedule (SentenceTransformer.py:612-640): 3 steps an epoch, dev at step 2 of each epoch and at its end;
    an lr of 1e-12 leaves the dev score where it was, so after the first no evaluation is better and patience 3 stops
    the run after the third of them."""
    import json

    _, summary = _consert_run(data_dir, tmp_path, "official-code", max_examples=48, max_steps=None, epochs=10,
                              lr=1e-12, eval_epoch_end=True, early_stopping_patience=3, batch_size=16)
    log = [json.loads(x) for x in (tmp_path / "official-code" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "dev" in r] == [2, 3, 5, 6]
    assert summary["stopped_early"] and summary["steps"] == 6 and summary["best_step"] == 2


# --------------------------------------------------------------------------------------------------------------
# 4. which parameters each official optimizer decays, and the official runs' fp16
# --------------------------------------------------------------------------------------------------------------

def _undecayed_4_2_1(name, module):
    """transformers-4.2.1 trainer.py:553 (SimCSE, DiffCSE, ESimCSE, Prompt-BERT): no_decay = ["bias",
    "LayerNorm.weight"], matched in the parameter's name."""
    return "bias" in name or "LayerNorm.weight" in name


def _undecayed_4_10(name, module):
    """transformers 4.10 Trainer.create_optimizer (SCD): get_parameter_names(model, [nn.LayerNorm]) less the names
    holding "bias" are decayed, i.e. every parameter of an nn.LayerNorm and every bias is not."""
    return isinstance(module, torch.nn.LayerNorm) or "bias" in name


def _undecayed_fit(name, module):
    """SentenceTransformer.fit (ConSERT sentence_transformers/SentenceTransformer.py:533)."""
    return any(part in name for part in ("bias", "LayerNorm.bias", "LayerNorm.weight"))


#: preset (under its official variant) -> which parameters the official trainer left undecayed; DiffAug's trainer
#: (diffaug/trainers.py:247-253, 264-269) builds each optimizer as one group, decayed by --weight_decay
OFFICIAL_DECAY = {"simcse-bert": _undecayed_4_2_1, "diffcse-bert-sts": _undecayed_4_2_1,
                  "esimcse-bert": _undecayed_4_2_1, "promptbert-bert": _undecayed_4_2_1,
                  "scd-bert-official": _undecayed_4_10, "consert-bert": _undecayed_fit,
                  "diffaug-semi-aux-bert-official": lambda name, module: False}


def _owners(objective):
    """{parameter name: the module that holds it}."""
    return {f"{m}.{n}".lstrip("."): module for m, module in objective.named_modules()
            for n, _ in module.named_parameters(recurse=False)}


def _decayed_by_one_step(named, optimizer, lr, weight_decay):
    """{name: decayed?} after one step of `optimizer` on zero gradients from weights of 1: the legacy AdamW's update
    is then 0, and only its weight decay, p -= lr · wd · p, moves a weight."""
    with torch.no_grad():
        for _, p in named:
            p.fill_(1.0)
            p.grad = torch.zeros_like(p)
    optimizer.step()
    out = {}
    for name, p in named:
        assert torch.all(p == 1.0) or torch.all(p == 1.0 - lr * weight_decay), name
        out[name] = bool(torch.all(p != 1.0))
    return out


@pytest.mark.parametrize("preset", sorted(OFFICIAL_DECAY))
def test_each_official_optimizer_decays_the_parameters_its_trainer_decayed(data_dir, preset):
    """With a weight decay set, each method's official optimizer decays what its official trainer decayed, on the
    objective the loop trains (the encoder, heads, generator or discriminator, prefixes, classifier). DiffAug's
    first-stage optimizer too."""
    from cse_kit.models import load_encoder
    from cse_kit.train import build_objective

    field = _variants(preset)[0]
    cfg = build_config(preset, "smoke", {field: "official-code", "weight_decay": 0.1, "data_dir": str(data_dir)})
    tokenizer, encoder = load_encoder(cfg.model, cfg.dropout)
    objective = build_objective(cfg, tokenizer, encoder)
    modules = _owners(objective)
    rule = OFFICIAL_DECAY[preset]
    named = [(n, p) for n, p in objective.named_parameters() if p.requires_grad]  # as the loop builds it
    sets = [named]
    if objective.two_stages:
        stage1 = {id(p) for p in objective.stage1_parameters()}
        sets.append([(n, p) for n, p in named if id(p) in stage1])
    for subset in sets:
        decayed = _decayed_by_one_step(subset, build_optimizer(subset, cfg.optimizer_name(), 1e-3, 0.1), 1e-3, 0.1)
        assert decayed == {n: not rule(n, modules[n]) for n, _ in subset}
    assert any(decayed.values()) and (preset.startswith("diffaug") or not all(decayed.values()))


def test_the_name_rule_and_scds_module_rule_leave_the_same_parameters_undecayed():
    """The kit matches names ("bias", "LayerNorm.weight") for SCD as for the 4.2.1 runs: on every encoder the kit
    trains, a LayerNorm is named LayerNorm, so 4.10's rule by module type picks the same parameters."""
    from cse_kit.models import load_encoder
    from cse_kit.train import build_objective

    for preset in ("scd-bert-official", "promptbert-sup-bert", "diffcse-bert-sts"):
        cfg = build_config(preset, "smoke", [f"{_variants(preset)[0]}=official-code"])
        objective = build_objective(cfg, *load_encoder(cfg.model, cfg.dropout))
        modules = _owners(objective)
        assert any(isinstance(m, torch.nn.LayerNorm) for m in modules.values())
        for name, module in modules.items():
            assert _undecayed_4_2_1(name, module) == _undecayed_4_10(name, module), (preset, name)


@pytest.mark.parametrize("preset", sorted(OFFICIAL_DECAY))
def test_official_variants_train_in_their_scripts_fp16_unless_the_profile_or_caller_says_otherwise(preset):
    field, (official, paper) = _variants(preset)
    assert build_config(preset, "paper", [f"{field}={official}"]).mixed_precision == "fp16"
    assert build_config(preset, "paper", [f"{field}={official}", "mixed_precision=bf16"]).mixed_precision == "bf16"
    assert build_config(preset, "paper", [f"{field}={paper}"]).mixed_precision == "auto"
    assert build_config(preset, "cpu", [f"{field}={official}"]).mixed_precision == "auto"  # the profile's


def test_the_header_says_which_precision_a_run_trains_in_and_the_official_scripts():
    from cse_kit.train.precision import unit_words
    from cse_kit.train.presets import precision_words

    cuda = precision_words(build_config("diffcse-bert-sts", "paper"), "fp16")
    assert cuda.startswith("fp16 autocast with dynamic loss scaling") and "as the official scripts (voidism/DiffCSE " \
        "run_diffcse.sh:30 --fp16)" in cuda
    cpu = precision_words(build_config("diffcse-bert-sts", "paper"), "no")
    assert cpu.startswith("fp32 (fp16 asked; Accelerate runs fp16 on accelerators only") and \
        cpu.endswith("; the official scripts train in fp16 (voidism/DiffCSE run_diffcse.sh:30 --fp16)")
    assert precision_words(build_config("consert-bert", "cpu"), "no") == \
        "fp32; the official scripts train in fp16 (yym6472/ConSERT scripts/*.sh:1 --use_apex_amp --apex_amp_opt_level O1)"
    # on a CPU the header names its bf16 unit (AMX-BF16, AVX512-BF16): unit_words, tested in tests/test_precision.py
    assert precision_words(build_config("simcse-bert", "paper"), "bf16") == "bf16 autocast" + unit_words("bf16")


def test_the_fp16_step_unscales_clips_and_skips_an_overflow_as_the_official_trainer():
    """The official --fp16 step (voidism/DiffCSE diffcse/trainers.py:530-553 on transformers-4.2.1 trainer.py:363,
    1259; SimCSE's and the others' the same): scaler.scale(loss).backward(), scaler.unscale_(optimizer), clipping at
    norm 1, scaler.step, scaler.update, then the schedule. The kit's loop runs it through Accelerate on CUDA
    (accelerator.backward, clip_gradients, the prepared optimizer's step); here the same calls, with torch's CPU
    GradScaler as the Accelerator's (Accelerate gives a CPU none). A finite step is the legacy AdamW step on the
    unscaled gradient clipped at norm 1; an overflowing one leaves the weights and the optimizer's state as they were
    and halves the scale."""
    from accelerate import Accelerator

    from cse_kit.train.step import clip_gradients

    named = _named_bert()
    params = [p for _, p in named]
    reference = [(n, torch.nn.Parameter(p.detach().clone())) for n, p in named]
    accelerator = Accelerator(cpu=True)
    scaler = accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)  # CUDA's defaults otherwise
    optimizer = accelerator.prepare(build_optimizer(named, "hf-trainer", 3e-5))
    want = build_optimizer(reference, "hf-trainer", 3e-5)
    g = torch.Generator().manual_seed(0)
    slopes = [torch.randn(p.shape, generator=g) for p in params]
    accelerator.backward(sum((p * s).sum() for p, s in zip(params, slopes)))
    assert torch.equal(params[0].grad, slopes[0] * 2.0 ** 16)
    norm = clip_gradients(scaler, optimizer.optimizer, params, 1.0)
    whole = float(torch.cat([s.flatten() for s in slopes]).norm())
    assert whole > 1 and float(norm) == pytest.approx(whole, rel=1e-6)  # the unscaled norm, then clipped to 1
    optimizer.step()
    for (_, p), s in zip(reference, slopes):
        p.grad = s.clone()
    torch.nn.utils.clip_grad_norm_([p for _, p in reference], 1.0)
    want.step()
    assert not optimizer.step_was_skipped and scaler.get_scale() == 2.0 ** 16
    assert all(torch.equal(a, b) for a, (_, b) in zip(params, reference))
    # an overflow: the step is skipped and the scale halved (GradScaler's backoff 0.5)
    before = [p.detach().clone() for p in params]
    steps = [optimizer.state[p]["step"] for p in params]
    optimizer.zero_grad()
    accelerator.backward(sum((p * s).sum() for p, s in zip(params, slopes)))
    params[0].grad[0, 0] = float("inf")
    clip_gradients(scaler, optimizer.optimizer, params, 1.0)
    optimizer.step()
    assert optimizer.step_was_skipped and scaler.get_scale() == 2.0 ** 15
    assert all(torch.equal(a, b) for a, b in zip(params, before))
    assert [optimizer.state[p]["step"] for p in params] == steps
