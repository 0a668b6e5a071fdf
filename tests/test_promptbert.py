"""PromptBERT in the kit: its presets (the official run.sh's settings), configuration checks, the second template's
re-wrapping, every preset trained on the smoke profile and its export evaluated with the stated pooler and template.
The objective's equality with the official code's computation is tests/test_promptbert_official.py."""

import json

import numpy as np
import pytest
import torch

from cse_kit.eval.encode import Encoder, pad_ids
from cse_kit.methods.promptbert import TEMPLATES, PromptBERT, rewrap
from cse_kit.models import build_smoke_model, load_model
from cse_kit.eval.prompt import Template, first_position, mask_states
from cse_kit.train import PRESETS, build_config, train
from cse_kit.train.export import ExportSettings

PROMPTBERT_PRESETS = [p for p, (_, s) in PRESETS.items() if s["method"] == "promptbert"]
SENTENCES = ["A man is playing a guitar.", "Two dogs run through the snow, chasing a red ball!", "The cat sleeps."]


def test_presets_carry_the_official_scripts_settings():
    """run.sh:73-141 with the shared flags of :151-168."""
    expected = {  # preset: (lr, batch, epochs, projector, mlm_transform, test pooler, templates)
        "promptbert-bert": (1e-5, 256, 1, "mlp", False, "prompt_mask", TEMPLATES["bert"]),
        "promptroberta-roberta": (1e-5, 256, 1, "mlp", False, "prompt_mask", TEMPLATES["roberta"]),
        "promptbert-sup-bert": (5e-5, 512, 3, "none", True, "prompt_mask_denoised", (TEMPLATES["bert"][0], None)),
        "promptroberta-sup-roberta": (5e-5, 512, 3, "mlp", False, "prompt_mask_denoised",
                                      (TEMPLATES["roberta"][0], None)),
    }
    assert sorted(PROMPTBERT_PRESETS) == sorted(expected)
    for preset, (lr, batch, epochs, projector, transform, pooler, templates) in expected.items():
        cfg = build_config(preset, "paper")
        assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.projector, cfg.mlm_transform, cfg.pooler) == \
            (lr, batch, epochs, projector, transform, pooler)
        assert (cfg.template, cfg.template2) == templates
        assert (cfg.max_seq_length, cfg.temp, cfg.eval_steps, cfg.metric, cfg.denoise) == \
            (32, 0.05, 125, "stsb_spearman", True)
        assert cfg.data == ("NLI" if "sup" in preset else "Wiki1M")
        assert PromptBERT.options_of(cfg).choices() == {"denoise_positions": "sentence", "promptbert_test": "plain",
                                            "promptbert_dev": "test"}
    assert PromptBERT.options_of(build_config("promptbert-bert", "paper", ["promptbert_variant=official-code"])).choices() == \
        {"denoise_positions": "from-zero", "promptbert_test": "official", "promptbert_dev": "official"}
    assert PromptBERT.options_of(build_config("promptbert-bert", "paper", ["promptbert_variant=official-code",
                                                                           "promptbert_dev=test"])).choices()["promptbert_dev"] == "test"
    assert build_config("promptbert-bert", "cpu").batch_size == 64  # 8 steps on the cpu profile's 512 sentences


@pytest.mark.parametrize("changes,message", [
    ({"pooler": "cls_before_pooler"}, "pooler=prompt_mask"),
    ({"template": None}, "template"),
    ({"projector": "batchnorm"}, "projector=mlp"),
    ({"mlm_transform": True}, "projector=none"),
    ({"denoise_positions": "middle"}, "denoise_positions"),
    ({"promptbert_variant": "code"}, "promptbert: unknown variant 'code'"),
    ({"promptbert_test": "evaluation.py"}, "promptbert_test"),
    ({"promptbert_dev": "denoised"}, "promptbert_dev"),
])
def test_settings_that_cannot_work_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        build_config("promptbert-bert", "smoke", changes)


def test_template2_and_mlm_transform_belong_to_promptbert():
    with pytest.raises(ValueError, match="template2 is a setting of method promptbert"):
        build_config("simcse-bert", "smoke", {"template2": TEMPLATES["bert"][1]})
    cfg = build_config("promptroberta-sup-roberta", "smoke", {"mlm_transform": True, "projector": "none"})
    tokenizer, encoder = build_smoke_model("smoke-roberta")
    with pytest.raises(ValueError, match="BERT's MLM-head transform"):
        PromptBERT.from_config(cfg, tokenizer, encoder)


def test_rewrap_moves_the_sentence_into_a_template_of_another_length(minilm):
    tokenizer = minilm[0]
    short = Template(tokenizer, TEMPLATES["bert"][0])
    long = Template(tokenizer, 'Here is what the sentence "*sent0*" tells us : it means*mask* .')
    sub_words = [tokenizer(s, add_special_tokens=False)["input_ids"] for s in SENTENCES]
    for source, target in ((short, long), (long, short)):
        ids, mask = pad_ids([source.wrap_ids(s) for s in sub_words], tokenizer.pad_token_id)
        got = rewrap(ids, mask, source, target, tokenizer.pad_token_id)
        want = pad_ids([target.wrap_ids(s) for s in sub_words], tokenizer.pad_token_id)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_views_after_the_first_are_encoded_in_the_second_template(minilm):
    """With dropout off, view 1 of the unsupervised batch is the sentence in the second template: the same vector as
    view 0 of a batch wrapped in the second template from the start."""
    tokenizer = minilm[0]
    _, encoder = build_smoke_model("smoke-bert")
    first, second = TEMPLATES["bert"]
    kit = PromptBERT(encoder, tokenizer, template=first, template2=second).eval()
    other = PromptBERT(encoder, tokenizer, template=second).eval()
    other.mlp.load_state_dict(kit.mlp.state_dict())

    def batch(template):
        ids, mask = pad_ids([Template(tokenizer, template).wrap_ids(tokenizer(s, add_special_tokens=False)["input_ids"])
                             for s in SENTENCES], tokenizer.pad_token_id)
        return ids.unsqueeze(1).repeat(1, 2, 1), mask.unsqueeze(1).repeat(1, 2, 1)

    with torch.no_grad():
        z = kit.vectors(*batch(first))
        z_second = other.vectors(*batch(second))
        ids, mask = batch(first)
        z_first = kit.embed({"input_ids": ids, "attention_mask": mask})
    torch.testing.assert_close(z[:, 1], z_second[:, 0])
    torch.testing.assert_close(z[:, 0], z_first[:, 1])
    assert (z[:, 0] - z[:, 1]).abs().max() > 1e-4  # the two templates do give two views


@pytest.mark.parametrize("preset", PROMPTBERT_PRESETS)
def test_every_promptbert_preset_trains_on_the_smoke_profile_and_evaluates_as_its_script(preset, data_dir, tmp_path):
    cfg = build_config(preset, "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir)})
    summary = train(cfg, progress=False)
    run = tmp_path / "run"
    assert summary["steps"] == 128 // 16 and np.isfinite(summary["best"])
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert len(losses) == 4 and all(np.isfinite(losses))
    meta = json.loads((run / "model" / "cse_kit.json").read_text())
    assert (meta["method"], meta["pooler"], meta["template"]) == ("promptbert", cfg.pooler, cfg.template)
    # the paper variant's export is the plain encoder, read at the first template's [MASK] with the sentence as
    # given and no head (denoised for the supervised scripts, at the positions training denoised at), as its
    # cse_kit.json states
    assert meta["prompt"] == {"template": cfg.template, "fill": "text", "append_period": False,
                              "denoise_positions": "sentence", "head": None}
    assert not (run / "model" / "prompt_head.safetensors").exists()
    tokenizer, model = load_model(str(run / "model"))
    assert type(model).__name__ == ("RobertaModel" if "roberta" in preset else "BertModel")
    reading = ExportSettings(run / "model").prompt
    template = Template(tokenizer, reading.template)
    got = Encoder(model, tokenizer, meta["pooler"], progress=False, template=reading).encode(SENTENCES)
    ids, mask = pad_ids([tokenizer(template.wrap_text(s))["input_ids"] for s in SENTENCES], tokenizer.pad_token_id)
    empty = torch.tensor([template.before + template.after])
    with torch.no_grad():
        want = mask_states(model(input_ids=ids, attention_mask=mask).last_hidden_state, ids, template.mask_token_id)
        if meta["pooler"] == "prompt_mask_denoised":  # minus the empty template's state at the sentence's length
            for i, n in enumerate((mask.sum(-1) - len(template)).tolist()):
                positions = torch.arange(len(template)) + first_position(model)
                positions[len(template.before):] += n
                out = model(input_ids=empty, attention_mask=torch.ones_like(empty),  # as the kit: one sequence
                            position_ids=positions[None]).last_hidden_state
                want[i] -= mask_states(out, empty, template.mask_token_id)[0]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_official_code_run_selects_on_the_dev_vector_and_exports_the_test_reading(data_dir, tmp_path):
    """promptroberta-sup-roberta under official-code: the run exports the test reading (the "." rule, the trained MLP
    after the denoising, its weights beside the encoder), and its dev score is the official dev vector's (ids in the
    template, no period, denoised, through the MLP), which the test reading does not reproduce (RoBERTa's text fill
    gives the sentence's first word a leading-space piece)."""
    from cse_kit.eval.dev import DevEvaluator
    from cse_kit.eval.prompt import PromptReading

    cfg = build_config("promptroberta-sup-roberta", "smoke", {"output_dir": str(tmp_path / "run"),
                                                              "data_dir": str(data_dir),
                                                              "promptbert_variant": "official-code"})
    train(cfg, progress=False)
    model_dir = tmp_path / "run" / "model"
    meta = json.loads((model_dir / "cse_kit.json").read_text())
    assert meta["prompt"] == {"template": cfg.template, "fill": "text", "append_period": True,
                              "denoise_positions": "from-zero", "head": "mlp"}
    tokenizer, model = load_model(str(model_dir))
    test = ExportSettings(model_dir).prompt
    dev = PromptReading(cfg.template, fill="ids", head=test.head, head_kind="mlp")
    score = DevEvaluator(tokenizer, "prompt_mask_denoised", str(data_dir), template=dev)(model)["stsb_spearman"]
    assert score == pytest.approx(meta["dev"]["stsb_spearman"], abs=1e-6)
    vectors = [Encoder(model, tokenizer, "prompt_mask_denoised", progress=False, template=reading).encode(SENTENCES)
               for reading in (dev, test)]
    assert np.abs(vectors[0] - vectors[1]).max() > 1e-4


def test_the_semi_supervised_wrapper_passes_the_readings_on(minilm):
    from cse_kit.methods.semi import SemiSupervised
    from cse_kit.methods.simcse import SimCSE

    tokenizer, _ = minilm
    _, encoder = build_smoke_model("smoke-bert")
    inner = PromptBERT(encoder, tokenizer, promptbert_test="official", promptbert_dev="official")
    wrapped = SemiSupervised(inner, "joint", 0.1)
    assert wrapped.test_reading() == inner.test_reading() and wrapped.dev_reading() == inner.dev_reading()
    assert SemiSupervised(SimCSE(encoder), "joint", 0.1).dev_reading() == ("cls_before_pooler", None)  # the run's
