"""DiffAug in the kit: the prompt template and poolers, two-stage training on the smoke profile (every preset), the
stage boundary under kill -9, export with the prefix and evaluation without flags. The objective's equality with
the official code's computation is tests/test_diffaug_official.py."""

import json
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from cse_kit.eval.encode import Encoder
from cse_kit.eval.prompt import PROMPTBERT_BERT, Template
from cse_kit.io import recover_dir
from cse_kit.train import PRESETS, build_config, train
from cse_kit.train.loop import checkpoint_step

import kit_process
from conftest import cli_env, kill_9_before_checkpoint

DIFFAUG_PRESETS = [p for p, (_, s) in PRESETS.items() if s["method"] == "diffaug"]
SENTENCES = ["A man is playing a guitar.", "Two dogs run through the snow, chasing a red ball!",
             "The cat sleeps.", 'She said "no" twice.']


def test_the_template_filled_with_ids_equals_the_template_filled_with_text(minilm):
    tokenizer = minilm[0]
    template = Template(tokenizer)
    assert tokenizer.convert_ids_to_tokens(template.before + template.after) == \
        ["[CLS]", "this", "sentence", "of", '"', '"', "means", "[MASK]", ".", "[SEP]"]
    for s in SENTENCES:
        by_ids = template.wrap_ids(tokenizer(s, add_special_tokens=False)["input_ids"])
        assert by_ids == tokenizer(template.wrap_text(s))["input_ids"]
    with pytest.raises(ValueError, match="one \\*sent0\\*"):
        Template(tokenizer, "no slot *mask*")


def test_prompt_poolers_read_the_mask_state_and_denoise_with_shifted_positions(tiny_bert):
    tokenizer, model = tiny_bert
    template = Template(tokenizer)
    got = Encoder(model, tokenizer, "prompt_mask", progress=False).encode(SENTENCES)
    denoised = Encoder(model, tokenizer, "prompt_mask_denoised", progress=False).encode(SENTENCES)
    for s, vec, vec_denoised in zip(SENTENCES, got, denoised):
        ids = torch.tensor([tokenizer(template.wrap_text(s))["input_ids"]])
        with torch.no_grad():
            hidden = model(input_ids=ids).last_hidden_state[0]
            mask_at = int((ids[0] == tokenizer.mask_token_id).nonzero()[-1])
            n = ids.shape[1] - len(template)
            empty = torch.tensor([template.before + template.after])
            positions = torch.arange(len(template))
            positions[len(template.before):] += n
            # with the kit's all-ones mask: without one, transformers >= 5.25 reads the position jump as a second
            # packed sequence (tests/test_position_jump.py)
            delta = model(input_ids=empty, attention_mask=torch.ones_like(empty),
                          position_ids=positions[None]).last_hidden_state[0, -3]
        np.testing.assert_allclose(vec, hidden[mask_at].numpy(), atol=1e-5)
        np.testing.assert_allclose(vec_denoised, (hidden[mask_at] - delta).numpy(), atol=1e-5)


def _cfg(data_dir, tmp_path, preset, **changes):
    return build_config(preset, "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir), **changes})


@pytest.mark.parametrize("preset", DIFFAUG_PRESETS)
def test_every_diffaug_preset_trains_both_stages_on_the_smoke_profile(preset, data_dir, tmp_path):
    cfg = _cfg(data_dir, tmp_path, preset)
    summary = train(cfg, progress=False)
    run = tmp_path / "run"
    main_steps = 128 // 16 // cfg.gradient_accumulation * cfg.epochs
    assert summary["steps"] == cfg.stage1_steps + main_steps
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    assert {r["stage"] for r in steps} == {1, 2} and all(np.isfinite(r["loss"]) for r in steps)
    assert all("nli" in r for r in steps if r["stage"] == 1)
    assert all(("nli" in r) == bool(cfg.aux_weight) for r in steps if r["stage"] == 2)
    meta = json.loads((run / "model" / "cse_kit.json").read_text())
    assert (meta["method"], meta["pooler"], meta["template"]) == ("diffaug", "prompt_mask", PROMPTBERT_BERT)
    prefix = load_file(str(run / "model" / "prefix.safetensors"))["prefix"]
    assert prefix.shape == (2 * cfg.prefix_len, 2 * 2 * 32)  # 2l positions x (layers x key/value x hidden)


def test_stage_one_skips_the_encoders_weight_gradients_and_ends_bit_identical(data_dir, tmp_path, monkeypatch):
    """The paper variant's stage 1 steps and clips the prefixes and classifier only, so the loop computes no gradient
    for the encoder's weights there (optim.gradients_only_for): the run ends bit for bit where a run that computes
    them (and drops them) ends; the official variant, which clips over every gradient, still computes them."""
    import contextlib

    from cse_kit.train import optim

    seen = []
    real = optim.gradients_only_for

    def recording(needed, trained):
        seen.append(sum(p.numel() for p in trained) - sum(p.numel() for p in {id(p): p for p in needed}.values()))
        return real(needed, trained)

    def run(name, skip, preset="diffaug-semi-bert"):
        monkeypatch.setattr(optim, "gradients_only_for", recording if skip else lambda *a: contextlib.nullcontext())
        train(build_config(preset, "smoke", {"output_dir": str(tmp_path / name), "data_dir": str(data_dir),
                                             "max_steps": 2}), progress=False)
        model = tmp_path / name / "model"
        return {**load_file(str(model / "model.safetensors")), **load_file(str(model / "prefix.safetensors"))}

    skipped, computed = run("skipped", True), run("computed", False)
    assert seen and all(n > 0 for n in seen)  # the encoder's weights were left out in every stage-1 step
    assert skipped.keys() == computed.keys() and all(torch.equal(skipped[k], computed[k]) for k in skipped)
    seen.clear()
    run("official", True, "diffaug-semi-bert-official")
    assert seen and all(n == 0 for n in seen)


def _cli(args):
    return kit_process.popen(args, env=cli_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)


def _stage_one_moved_the_prefixes_only(checkpoint) -> None:
    from cse_kit.models import load_encoder
    from cse_kit.train import build_objective

    from accelerate.utils import set_seed

    cfg = build_config("diffaug-semi-aux-bert", "smoke")
    set_seed(cfg.seed)  # as the loop, before the encoder and the objective's own parts are built
    initial = build_objective(cfg, *load_encoder(cfg.model)).state_dict()
    saved = load_file(str(checkpoint))
    assert all(torch.equal(saved[k], initial[k]) for k in initial if k.startswith(("encoder.", "mlp.")))
    assert not torch.equal(saved["prefix_encoder.embedding.weight"], initial["prefix_encoder.embedding.weight"])
    assert not torch.equal(saved["classifier.weight"], initial["classifier.weight"])


def test_resume_after_kill_9_in_each_stage_ends_like_an_uninterrupted_run(data_dir, tmp_path):
    args = ["train", "--preset", "diffaug-semi-aux-bert", "--profile", "smoke", "--data-dir", str(data_dir),
            "--no-progress", "--set", "save_steps=1", "--set", "stage1_steps=4", "--set", "eval_steps=3"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _cli(args + ["--output-dir", str(whole)]).wait() == 0
    kill_9_before_checkpoint(args + ["--output-dir", str(cut)], 3)  # inside stage 1 (steps 1-4)
    assert checkpoint_step(recover_dir(cut / "checkpoint")) == 2  # set aside by the swap, put back as a resume does
    _stage_one_moved_the_prefixes_only(cut / "checkpoint" / "model.safetensors")
    kill_9_before_checkpoint(args + ["--output-dir", str(cut)], 6)  # inside stage 2, at an evaluation
    assert _cli(args + ["--output-dir", str(cut)]).wait() == 0
    a, b = (json.loads((d / "summary.json").read_text()) for d in (whole, cut))
    assert (a["best"], a["best_step"], a["steps"]) == (b["best"], b["best_step"], b["steps"])
    strip = lambda d: [{k: v for k, v in json.loads(x).items() if k != "dev"}  # noqa: E731
                       for x in (d / "log.jsonl").read_text().splitlines()]
    assert strip(whole) == strip(cut)
    for name in ("model.safetensors", "prefix.safetensors"):
        wa, wb = load_file(str(whole / "model" / name)), load_file(str(cut / "model" / name))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_an_exported_diffaug_model_is_evaluated_with_no_flags_and_refused_by_export_st(data_dir, tmp_path):
    from cse_kit.models import load_model
    from cse_kit.models.prefix import PrefixedEncoder
    from cse_kit.train.export import export_sentence_transformers

    train(_cfg(data_dir, tmp_path, "diffaug-semi-bert"), progress=False)
    model_dir = tmp_path / "run" / "model"
    tokenizer, model = load_model(str(model_dir))
    assert isinstance(model, PrefixedEncoder) and model.prefix_length == 16
    out = tmp_path / "eval.json"
    proc = _cli(["eval", "--model", str(model_dir), "--tasks", "STSBenchmark", "--data-dir", str(data_dir),
                 "--output", str(out)])
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    assert "pooler prompt_mask (from" in stdout
    result = json.loads(out.read_text())
    expected = Encoder(model, tokenizer, "prompt_mask", progress=False)
    from cse_kit.eval import evaluate

    direct = evaluate(expected, "STSBenchmark", "test", data_dir)["sts"]["STSBenchmark"]
    assert result["sts"]["STSBenchmark"]["test"] == pytest.approx(direct["test"])
    with pytest.raises(ValueError, match="learned prefix"):
        export_sentence_transformers(model_dir, tmp_path / "st")


def test_an_official_bertforcl_checkpoint_loads_with_its_prefix(tiny_bert, tmp_path):
    """The authors' released models are BertForCL state dicts (bert.*, mlp.*, sup_classifier.*, prefix_encoder.*
    with the official names): the kit evaluates the encoder with the prefix its PrefixEncoder produces."""
    from cse_kit.models import load_model
    from cse_kit.papers.released import lookup
    from cse_kit.models.prefix import PrefixedEncoder

    tokenizer, bert = tiny_bert
    hidden, layers, positions = bert.config.hidden_size, bert.config.num_hidden_layers, 16
    g = torch.Generator().manual_seed(3)
    official = {"prefix_encoder.embedding.weight": torch.randn(positions, hidden, generator=g),
                "prefix_encoder.trans1.0.weight": torch.randn(hidden, hidden, generator=g) / 8,
                "prefix_encoder.trans1.0.bias": torch.randn(hidden, generator=g),
                "prefix_encoder.trans1.2.weight": torch.randn(2 * layers * hidden, hidden, generator=g) / 8,
                "prefix_encoder.trans1.2.bias": torch.randn(2 * layers * hidden, generator=g),
                "mlp.dense.weight": torch.randn(hidden, hidden, generator=g), "mlp.dense.bias": torch.zeros(hidden),
                "sup_classifier.weight": torch.randn(2, 3 * hidden, generator=g), "sup_classifier.bias": torch.zeros(2),
                **{f"bert.{k}": v for k, v in bert.state_dict().items()}}
    folder = tmp_path / "diffaug-semisup"
    folder.mkdir()
    torch.save(official, folder / "pytorch_model.bin")
    bert.config.architectures = ["BertForCL"]
    bert.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _, model = load_model(str(folder))
    assert isinstance(model, PrefixedEncoder)
    state = model.encoder.state_dict()
    assert all(torch.equal(state[k], v) for k, v in bert.state_dict().items() if k in state)
    e = official["prefix_encoder.embedding.weight"]
    first = torch.tanh(e @ official["prefix_encoder.trans1.0.weight"].T + official["prefix_encoder.trans1.0.bias"])
    table = first @ official["prefix_encoder.trans1.2.weight"].T + official["prefix_encoder.trans1.2.bias"]
    torch.testing.assert_close(model.prefix, table)
    assert lookup("Tianduo/diffaug-semisup-bert-base-uncased")["pooler"] == "prompt_mask"
    assert lookup("Tianduo/diffaug-sup-bert-base-uncased")["pooler"] == "prompt_mask"


@pytest.mark.parametrize("stepping", ["first stage", "main"])
def test_fp16_clipping_unscales_a_parameter_of_both_optimizers_once(stepping):
    """DiffAug's prefixes are in both optimizers; Accelerate's clip_grad_norm_ unscaled every prepared optimizer, so
    under fp16 they reached AdamW at 2^-16 of their gradient. Only the stepping optimizer is unscaled now; a
    parameter outside it keeps its scaled gradient, as the official stage 1 (unscale optimizer2, clip everything)."""
    from cse_kit.train.step import clip_gradients

    shared, encoder = torch.nn.Parameter(torch.tensor([1.0, -2.0])), torch.nn.Parameter(torch.tensor([3.0]))
    main, first = torch.optim.AdamW([shared, encoder]), torch.optim.AdamW([shared])
    scale = 2.0 ** 16
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale((shared ** 2).sum() + (encoder ** 2).sum()).backward()
    clip_gradients(scaler, first if stepping == "first stage" else main, [shared, encoder], max_norm=1e12)
    assert torch.equal(shared.grad, 2 * shared.detach())
    assert torch.equal(encoder.grad, 2 * encoder.detach() * (scale if stepping == "first stage" else 1))


def test_a_stage1_longer_than_the_main_stage_is_warned_of(data_dir, tmp_path):
    """Both schedules are sized to the main stage (the official trainer): past its length stage 1's lr is 0."""
    cfg = _cfg(data_dir, tmp_path, "diffaug-semi-bert", stage1_steps=3, max_steps=2, eval_steps=100)
    with pytest.warns(UserWarning, match="stage1_steps 3 exceed the main stage's 2 steps"):
        train(cfg, progress=False)
    lrs = [r["lr"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines())
           if r.get("stage") == 1]
    assert lrs[-1] == 0.0


@pytest.mark.slow
def test_semi_supervised_diffaug_trains_all_minilm_on_the_cpu_profile(data_dir, tmp_path):
    """A real run (about 1.5 min here): all-MiniLM-L6-v2, 8 stage-1 steps on SNLI triplets, 16 contrastive steps on the
    Wiki1M sample with the auxiliary loss; stage 2 improves STS-B dev, and the export is evaluated with no flags."""
    from cse_kit.eval import DevEvaluator
    from cse_kit.models import load_model

    cfg = build_config("diffaug-semi-aux-bert", "cpu", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir)})
    summary = train(cfg, progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    dev = [r["dev"]["stsb_spearman"] for r in log if "dev" in r]
    assert summary["steps"] == 8 + 16 and summary["best"] == max(dev) > dev[0] + 5
    tokenizer, model = load_model(str(tmp_path / "run" / "model"))
    meta = json.loads((tmp_path / "run" / "model" / "cse_kit.json").read_text())
    again = DevEvaluator(tokenizer, meta["pooler"], str(data_dir), template=meta["template"])(model)
    assert again["stsb_spearman"] == pytest.approx(summary["best"], abs=1e-3)
