"""DiffAug Table 6's semi-supervised strategies (cse_kit.methods.semi) as one setting over any method: the NLI head's
loss by hand, what each stage trains, the supervised stage's own schedule, and the settings each strategy fills in."""

import json

import pytest
import torch
from torch import nn

from cse_kit.methods.semi import SemiSupervised, nli_cross_entropy
from cse_kit.train import build_config, train


def test_nli_cross_entropy_is_the_two_way_softmax_on_u_v_and_their_distance():
    torch.manual_seed(0)
    z, head = torch.randn(4, 3, 5, dtype=torch.float64), nn.Linear(15, 2).double()
    expected = 0.0
    for u, v, w in z:
        for other, label in ((v, 1), (w, 0)):
            logits = head(torch.cat([u, other, (u - other).abs()]))
            expected -= torch.log_softmax(logits, -1)[label] / 8
    assert torch.allclose(nli_cross_entropy(head, z).double(), expected, atol=1e-6)  # logits cast to fp32


def _cfg(data_dir, tmp_path, preset="simcse-bert", **changes):
    return build_config(preset, "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir),
                                          "max_steps": 4, **changes})


def test_each_strategy_fills_in_its_settings_and_a_given_one_wins(data_dir, tmp_path):
    joint = _cfg(data_dir, tmp_path, semi_strategy="joint")
    assert (joint.aux_weight, joint.stage1_steps, joint.nli_data) == (0.1, 0, "SNLI-triplets")
    assert _cfg(data_dir, tmp_path, semi_strategy="sup-unsup").stage1_steps == 4  # the smoke profile's
    sup_joint = _cfg(data_dir, tmp_path, semi_strategy="sup-joint", aux_weight=0.5)
    assert (sup_joint.aux_weight, sup_joint.stage1_steps, sup_joint.stage1_lr) == (0.5, 4, 2e-5)
    paper = build_config("simcse-bert", "paper", ["semi_strategy=sup-unsup"])
    assert (paper.stage1_steps, paper.nli_data, paper.nli_batch_size) == (275_601 // 48, "NLI", 48)


@pytest.mark.parametrize("bad, message", [
    ({"semi_strategy": "joint", "aux_weight": 0}, "set aux_weight > 0"),
    ({"semi_strategy": "sup-unsup", "aux_weight": 0.1}, "set aux_weight=0"),
    ({"semi_strategy": "joint", "stage1_steps": 3}, "set stage1_steps=0"),
    ({"semi_strategy": "semi"}, "unknown semi_strategy"),
    ({"aux_weight": 0.1}, "semi_strategy=joint"),
])
def test_inconsistent_settings_are_refused_with_the_fix(data_dir, tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        _cfg(data_dir, tmp_path, **bad)


def test_sup_unsup_trains_everything_on_nli_then_the_contrastive_loss_alone(data_dir, tmp_path):
    summary = train(_cfg(data_dir, tmp_path, semi_strategy="sup-unsup", eval_steps=100), progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    assert [r["stage"] for r in steps] == [1] * 2 + [2] * 2  # logged every 2 steps: 4 supervised, then 4
    assert all("nli" in r and "contrastive" not in r for r in steps[:2])
    assert all("contrastive" in r and "nli" not in r for r in steps[2:])
    # the supervised stage's schedule decays over its own 4 steps, the second stage's over its 4
    assert [r["lr"] for r in steps] == pytest.approx([2e-5 * 2 / 4, 0.0, 1e-4 * 2 / 4, 0.0])
    assert summary["best_step"] is not None and (tmp_path / "run" / "model" / "config.json").is_file()


def test_joint_adds_alpha_times_the_nli_loss_to_the_method_s_loss(tiny_bert):
    from cse_kit.methods import SimCSE

    tokenizer, model = tiny_bert
    torch.manual_seed(0)
    inner = SimCSE(model)
    objective = SemiSupervised(inner, "joint", alpha=0.3).eval()
    ids = tokenizer(["a cat sits", "the dog runs fast", "a man plays"], padding=True, return_tensors="pt")
    batch = {"input_ids": ids["input_ids"][:, None].expand(-1, 2, -1),
             "attention_mask": ids["attention_mask"][:, None].expand(-1, 2, -1),
             "nli_input_ids": ids["input_ids"][None], "nli_attention_mask": ids["attention_mask"][None]}
    out = objective(batch)
    z = inner.embed({"input_ids": batch["nli_input_ids"], "attention_mask": batch["nli_attention_mask"]})
    assert torch.allclose(out["loss"], inner(batch)["loss"] + 0.3 * nli_cross_entropy(objective.classifier, z))
    assert objective.test_model()[1] == inner.test_pooler
    objective.stage = 1
    assert torch.allclose(objective(batch)["loss"], nli_cross_entropy(objective.classifier, z))
