"""The one method protocol (cse_kit.methods.Objective): every method the kit trains is an Objective whose hooks the
loop calls as declared (a method's own learning rates among them), and a pooler is declared in one place, from
which a run trains, evaluates and exports with it."""

import importlib
import json
import pkgutil

import numpy as np
import pytest
import torch
from torch import nn

import cse_kit.methods
from cse_kit.eval import Encoder
from cse_kit.eval.encode import POOLERS, Pooler, add_pooler
from cse_kit.methods import METHODS, Objective, register
from cse_kit.methods.registry import is_kit_method
from cse_kit.methods.semi import SemiSupervised
from cse_kit.train import build_config, train
from cse_kit.train.export import ST_POOLING, export_sentence_transformers
from cse_kit.models import load_encoder
from cse_kit.train import build_objective
from cse_kit.train.precision import build_accelerator
from cse_kit.train.setup import optimization

SENTENCES = ["a man is playing a guitar .", "two dogs run in the snow", "the stock market fell"]


@pytest.fixture
def own_methods():
    """Methods registered by a test are forgotten after it."""
    before = dict(METHODS)
    yield
    METHODS.clear()
    METHODS.update(before)


def test_every_method_the_kit_trains_is_an_objective():
    kit = {name: cls for name, cls in METHODS.items() if is_kit_method(cls)}
    assert set(kit) == {"simcse", "diffcse", "scd", "esimcse", "promptbert", "consert", "diffaug"}
    assert all(issubclass(cls, Objective) for cls in [*kit.values(), SemiSupervised])
    # and so is every class of cse_kit/methods/ that a run builds from its configuration
    for info in pkgutil.iter_modules(cse_kit.methods.__path__):
        module = importlib.import_module(f"cse_kit.methods.{info.name}")
        built = [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__
                 and hasattr(c, "from_config")]
        assert all(issubclass(c, Objective) for c in built), module.__name__


def test_the_defaults_are_a_one_stage_method_read_with_its_training_pooler(tiny_bert):
    _, encoder = tiny_bert
    objective = Objective(encoder, pooler="avg")
    assert (objective.two_stages, objective.stage1_own_schedule, objective.learning_rates()) == (False, False, {})
    assert objective.test_model() == (encoder, "avg") and objective.test_reading() is None
    assert objective.dev_reading() == ("avg", None) and objective.test_max_length is None  # None: the run's template
    assert (Objective.paper, Objective.citation) == (None, None)


def test_a_method_s_own_part_trains_at_its_own_learning_rate(data_dir, tmp_path, own_methods):
    """A learned temperature at lr 0.01 beside the run's lr: its own group in the main optimizer, scaled by the same
    schedule; Adam's first step moves each parameter by its group's lr."""
    @register("learned-temperature")
    class LearnedTemperature(Objective):
        def __init__(self, encoder, **kwargs):
            super().__init__(encoder, **kwargs)
            self.log_scale = nn.Parameter(torch.zeros(()))

        def learning_rates(self):
            return {"log_scale": 0.01}

        def loss(self, z):
            return self.info_nce(z[:, 0], z[:, 1], temp=self.temp * self.log_scale.exp())

    cfg = build_config("simcse-bert", "smoke", {"method": "learned-temperature", "data_dir": str(data_dir),
                                                "output_dir": str(tmp_path / "run"), "weight_decay": 0.0})
    tokenizer, encoder = load_encoder(cfg.model, cfg.dropout)
    objective = build_objective(cfg, tokenizer, encoder)
    run = optimization(cfg, objective, build_accelerator("no"), 0, 4)
    (optimizer,), (schedule,) = run.optimizers, run.schedulers
    main, own = optimizer.param_groups
    assert own["params"] == [objective.log_scale] and all(p is not objective.log_scale for p in main["params"])
    assert (main["lr"], own["lr"]) == pytest.approx((cfg.lr, 0.01))
    ids = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    before = objective.log_scale.item(), objective.projector[0].bias.detach().clone()
    objective({k: v[:, None].expand(-1, 2, -1) for k, v in ids.items()})["loss"].backward()
    optimizer.step()
    schedule.step()
    assert abs(objective.log_scale.item() - before[0]) == pytest.approx(0.01, rel=1e-3)
    assert (objective.projector[0].bias - before[1]).abs().max().item() == pytest.approx(cfg.lr, rel=1e-2)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([cfg.lr * 3 / 4, 0.01 * 3 / 4])
    summary = train(cfg, progress=False)  # and the loop trains it
    assert summary["steps"] == 8 and np.isfinite(summary["best"])


def _max_over_tokens(outputs, attention_mask):
    """sentence-transformers' max pooling: padding at -1e9, the largest of each feature over the tokens."""
    return outputs.last_hidden_state.masked_fill(attention_mask[..., None] == 0, -1e9).max(1).values


def _max_of_first_and_last(outputs, attention_mask):
    hidden = (outputs.hidden_states[0] + outputs.hidden_states[-1]) / 2
    return hidden.masked_fill(attention_mask[..., None] == 0, -1e9).max(1).values


@pytest.fixture
def declared():
    """Test-only poolers, declared in one place each and forgotten after the test."""
    poolers = [add_pooler(Pooler("test_max", "max over tokens of the last layer", _max_over_tokens,
                                 st_pooling_mode="max")),
               add_pooler(Pooler("test_max_first_last", "max over tokens of (embeddings + last layer) / 2",
                                 _max_of_first_and_last, reads_all_layers=True))]
    yield poolers
    for pooler in poolers:
        del POOLERS[pooler.name]


def test_a_pooler_declared_once_trains_evaluates_and_exports(declared, data_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    cfg = build_config("simcse-bert", "smoke", {"pooler": "test_max", "data_dir": str(data_dir),
                                                "output_dir": str(tmp_path / "run")})
    summary = train(cfg, progress=False)  # its dev evaluation reads the model with the pooler
    assert 0 < summary["best"] <= 100
    model_dir = tmp_path / "run" / "model"
    assert json.loads((model_dir / "cse_kit.json").read_text())["pooler"] == "test_max"
    model, tokenizer = AutoModel.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    ours = Encoder(model, tokenizer, "test_max", progress=False, device="cpu").encode(SENTENCES)
    ids = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        by_hand = _max_over_tokens(model(**ids), ids["attention_mask"]).numpy()
    assert np.allclose(ours, by_hand, atol=1e-5)
    assert dict(ST_POOLING)["test_max"] == "max"
    st = pytest.importorskip("sentence_transformers")
    theirs = st.SentenceTransformer(str(export_sentence_transformers(model_dir, tmp_path / "st")),
                                    device="cpu").encode(SENTENCES)
    assert np.allclose(ours, theirs, atol=1e-5)
    with pytest.raises(ValueError, match="'test_max_first_last' has no sentence-transformers equivalent"):
        export_sentence_transformers(model_dir, tmp_path / "st2", pooler="test_max_first_last")


def test_a_pooler_that_reads_every_layer_gets_them_in_training_and_evaluation(declared, tiny_bert):
    tokenizer, encoder = tiny_bert  # in eval mode: no dropout
    ids = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = _max_of_first_and_last(encoder(**ids, output_hidden_states=True), ids["attention_mask"])
        pooled = Objective(encoder, pooler="test_max_first_last").eval().pooled(
            {k: v[:, None] for k, v in ids.items()})[:, 0]
    encoded = Encoder(encoder, tokenizer, "test_max_first_last", progress=False, device="cpu").encode(SENTENCES)
    torch.testing.assert_close(pooled, want)
    assert np.allclose(encoded, want.numpy(), atol=1e-5)
