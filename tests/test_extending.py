"""A researcher's own method and data under the kit's protocol (docs/extending.md): the Objective base class, options,
plugins found by every process, the method's source in its runs' keys, tasks and dev sets of one's own."""

import csv
import importlib
import linecache
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from cse_kit.data import DataError, load_sts
from cse_kit.eval import Encoder, evaluate
from cse_kit.eval.transfer import evaluate_transfer_task, load_task
from cse_kit.eval.user_tasks import UserTask, evaluate_user_task, parse_user_task
from cse_kit.methods import METHODS, MethodError, Objective, SimCSE, method_class, register
from cse_kit.methods import registry
from cse_kit.results import ResultStore, record_key
from cse_kit.train.config import TrainConfig
from cse_kit.train.presets import build_config

import forked_python

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "margin_simcse.py"


@pytest.fixture
def own_methods():
    """Methods registered by a test are forgotten after it."""
    before = dict(METHODS)
    loaded = set(registry._loaded)
    yield
    METHODS.clear()
    METHODS.update(before)
    registry._loaded.clear()
    registry._loaded.update(loaded)


def _plugin(folder: Path, name: str, margin_line: str = "cos = a @ b.T - self.options.margin") -> Path:
    """A method module `name`.py in folder, registering method `name`."""
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(f'''
        from dataclasses import dataclass
        import torch
        import torch.nn.functional as F
        from cse_kit.methods import Objective, register

        @register("{name}")
        class Method(Objective):
            @dataclass
            class Options:
                margin: float = 0.1
                hard: bool = False

            def loss(self, z):
                a, b = F.normalize(z[:, 0], dim=-1), F.normalize(z[:, 1], dim=-1)
                {margin_line} * torch.eye(len(a))
                return F.cross_entropy(cos / self.temp, torch.arange(len(a)))
    '''))
    return path


def _batch(tokenizer, rows=4):
    b = tokenizer(["a man plays a guitar", "the cat sat on the mat", "stocks fell on monday", "she reads"][:rows],
                  padding=True, return_tensors="pt")
    return {k: v.unsqueeze(1).expand(-1, 2, -1).contiguous() for k, v in b.items()}


def _tiny(tokenizer):
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64), add_pooling_layer=False)


def test_an_objective_whose_loss_is_the_kits_infonce_trains_exactly_simcse(minilm, own_methods):
    """The base class's encoder pass, pooler, projector and InfoNCE are SimCSE's: the same loss and every gradient,
    dropout on (the same random draws), plain and under gradient caching."""
    from cse_kit.methods.grad_cache import cached_step

    @register("plain-infonce")
    class PlainInfoNCE(Objective):
        def loss(self, z):
            return self.info_nce(z[:, 0], z[:, 1])

    tokenizer = minilm[0]
    batch = _batch(tokenizer)
    results = []
    for cls in (SimCSE, PlainInfoNCE):
        torch.manual_seed(1)
        model = cls(_tiny(tokenizer))
        torch.manual_seed(2)
        loss = model(batch)["loss"]
        loss.backward()
        results.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (simcse_loss, simcse_grads), (own_loss, own_grads) = results
    assert own_loss == simcse_loss
    assert simcse_grads.keys() == own_grads.keys()
    assert all(torch.equal(simcse_grads[n], own_grads[n]) for n in simcse_grads)

    torch.manual_seed(1)
    model = PlainInfoNCE(_tiny(tokenizer))
    model.eval()  # dropout off: chunks of 2 rows give the whole batch's gradient
    cached_step(model, batch, 2, lambda loss: loss.backward())
    cached = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(batch)["loss"].backward()
    assert all(torch.allclose(cached[n], p.grad, atol=1e-6) for n, p in model.named_parameters())


def test_options_are_typed_validated_and_resolved_over_their_defaults(own_methods):
    registry.import_plugin(str(EXAMPLE))
    cfg = build_config("simcse-bert", "smoke", ["method=margin-simcse", "margin-simcse.margin=0.25"])
    assert cfg.method_options == {"margin": 0.25}
    same = build_config("simcse-bert", "smoke", {"method": "margin-simcse", "method_options": {"margin": 0.1}})
    default = build_config("simcse-bert", "smoke", ["method=margin-simcse"])
    assert default.method_options == {"margin": 0.1} and record_key(same) == record_key(default)
    assert record_key(cfg) != record_key(default)
    for settings, words in [(["margin-simcse.margn=0.2"], "has no option 'margn'; its options are: "
                                                            "margin-simcse.margin"),
                            (["margin-simcse.margin=abc"], "margin-simcse.margin takes a number, got 'abc'"),
                            (["margin-simcse.margin=2"], r"margin must be in \[0, 1\), got 2.0")]:
        with pytest.raises(ValueError, match=words):
            build_config("simcse-bert", "smoke", ["method=margin-simcse", *settings])
    with pytest.raises(ValueError, match="sets an option of method margin-simcse, but this run's method is simcse: "
                                         "add --set method=margin-simcse"):
        build_config("simcse-bert", "smoke", ["margin-simcse.margin=0.2"])
    with pytest.raises(ValueError, match="method simcse takes no options .*configuration's own fields"):
        build_config("simcse-bert", "smoke", {"method_options": {"margin": 0.2}})


def test_registering_refuses_a_name_taken_by_another_class_and_a_class_without_from_config(own_methods):
    @register("twice")
    class First(Objective):
        pass

    @register("twice")  # the same class again (a notebook cell run twice): replaced
    class First(Objective):  # noqa: F811
        pass

    with pytest.raises(MethodError, match="method 'twice' is already .*First; register .*Second under another name"):
        @register("twice")
        class Second(Objective):
            pass
    with pytest.raises(MethodError, match="has no from_config"):
        register("bare")(type("Bare", (), {}))
    with pytest.raises(MethodError, match="without spaces"):
        register("my method")


def _python(code: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_every_process_finds_a_plugin_by_import_path_file_or_entry_point(tmp_path):
    """$CSE_KIT_PLUGINS names modules (on the path, in the current folder) or files; an installed distribution's
    `cse_kit.methods` entry point is imported too; a module that is not there is one line."""
    _plugin(tmp_path, "by_name")
    (tmp_path / "elsewhere").mkdir()
    _plugin(tmp_path / "elsewhere", "by_file")
    site = tmp_path / "site"
    (site / "by_entry_point-1.0.dist-info").mkdir(parents=True)
    _plugin(site, "by_entry")
    (site / "by_entry_point-1.0.dist-info" / "METADATA").write_text("Name: by-entry-point\nVersion: 1.0\n")
    (site / "by_entry_point-1.0.dist-info" / "entry_points.txt").write_text("[cse_kit.methods]\nmine = by_entry\n")
    code = ("from cse_kit.methods import method_class\n"
            "print([method_class(n).method for n in ('by_name', 'by_file', 'by_entry')])")
    out = _python(code, tmp_path, CSE_KIT_PLUGINS=f"by_name, {tmp_path / 'elsewhere' / 'by_file.py'}",
                  PYTHONPATH=str(site))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['by_name', 'by_file', 'by_entry']"
    out = _python("from cse_kit.methods import method_class; method_class('x')", tmp_path,
                  CSE_KIT_PLUGINS="not_a_module")
    assert "names module 'not_a_module', which is not importable from here: install it, add its folder to " \
           "PYTHONPATH, or give its .py file's path" in out.stderr.splitlines()[-1]


def test_the_method_source_is_in_the_key_so_editing_the_loss_recomputes_its_runs_only(tmp_path, data_dir,
                                                                                      own_methods, monkeypatch):
    path = _plugin(tmp_path, "edited_method")
    registry.import_plugin(str(path))
    store = ResultStore(tmp_path / "store", data_dir)
    trained = []
    train = ResultStore._train
    monkeypatch.setattr(ResultStore, "_train", lambda self, key, cfg, on_dev=None: (trained.append(cfg.method),
                                                                                    train(self, key, cfg, on_dev))[1])
    simcse = build_config("simcse-bert", "smoke", {"seed": 3})
    own = build_config("simcse-bert", "smoke", {"seed": 3, "method": "edited_method"})
    for cfg in (simcse, own):
        store.get(cfg, ("sts_dev",))
    assert trained == ["simcse", "edited_method"]
    simcse_key, own_key = store.key(simcse), store.key(own)

    _plugin(tmp_path, "edited_method", "cos = a @ b.T - 2 * self.options.margin")  # one line of the loss
    module = sys.modules["edited_method"]
    spec = importlib.util.spec_from_file_location("edited_method", path)
    spec.loader.exec_module(module)  # the module as a new process would import it
    assert store.key(simcse) == simcse_key and store.key(own) != own_key
    assert store.has(simcse, ("sts_dev",)) and not store.has(own, ("sts_dev",))
    for cfg in (simcse, own):
        store.get(cfg, ("sts_dev",))
    assert trained == ["simcse", "edited_method", "edited_method"]


def test_a_notebook_cell_method_is_keyed_by_its_cell_and_never_sent_to_another_process(own_methods):
    cell = textwrap.dedent('''
        from cse_kit.methods import Objective, register

        @register("from-a-cell")
        class FromACell(Objective):
            def loss(self, z):
                return self.info_nce(z[:, 0], z[:, 1])
    ''')
    name = "/tmp/ipykernel_1/3141592.py"  # as IPython names a cell, and keeps it in linecache
    linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(cell, name, "exec"), namespace)
        cls = method_class("from-a-cell")
        assert registry.method_source(cls) == cell
        with pytest.raises(MethodError, match="defined in this notebook, so another process .* cannot train it: move "
                                              "the class into a module"):
            registry.check_sendable("from-a-cell")
    finally:
        linecache.cache.pop(name, None)
    with pytest.raises(MethodError, match="cannot be read, and a run's key needs it .* not through exec"):
        record_key(build_config("simcse-bert", "smoke", {"method": "from-a-cell"}))


def test_the_report_workers_refuse_a_notebook_cell_method_before_starting(tmp_path, data_dir, own_methods):
    from cse_kit.results.parallel import compute_all

    exec(compile("from cse_kit.methods import Objective, register\n@register('cell-only')\nclass C(Objective):\n"
                 "    pass\n", "<cell>", "exec"), {"__name__": "__main__"})
    cfg = build_config("simcse-bert", "smoke", {"method": "cell-only"})
    store = ResultStore(tmp_path, data_dir)
    store.key = lambda subject: f"key-{subject.seed}"  # the cell's source is not readable here: the refusal first
    with pytest.raises(MethodError, match="move the class into a module"):
        compute_all(store, [(cfg, ("sts_dev",)), (cfg.replace(seed=2), ("sts_dev",))], workers=2)


# --- your data ---------------------------------------------------------------------------------------------------


def _write_csv(path: Path, header: list[str], rows: list) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def smoke_encoder(data_dir):
    from cse_kit.models import load_model

    tokenizer, model = load_model("smoke-bert", data_dir=data_dir)
    return Encoder(model, tokenizer, "avg", batch_size=64)


def test_an_sts_csv_of_stsb_test_gives_the_kits_stsb_number(tmp_path, data_dir, smoke_encoder):
    pairs = load_sts("STSBenchmark", "test", data_dir)
    path = _write_csv(tmp_path / "stsb.csv", ["sentence1", "sentence2", "score"],
                      [(p.sent1, p.sent2, repr(p.score)) for p in pairs])
    result = evaluate(smoke_encoder, f"STSBenchmark,mine={path}", "test", data_dir)
    assert result["own"]["mine"]["spearman"] == result["sts"]["STSBenchmark"]["test"]["spearman"]
    assert result["own"]["mine"]["n"] == len(pairs) == 1379


def test_a_classification_csv_of_mr_gives_the_kits_mr_number(tmp_path, data_dir, smoke_encoder):
    """The same records (MR, a 600-record sample as the smoke profile reads) through the same cross-validation."""
    mr = load_task("MR", data_dir, 600)
    records = mr.splits["all"]
    path = _write_csv(tmp_path / "mr.csv", ["text", "label"], [(r.text, r.label) for r in records])
    mine = evaluate_user_task(smoke_encoder, parse_user_task(f"mine={path}"))
    kit = evaluate_transfer_task(smoke_encoder, mr, "test")
    assert (mine["acc"], mine["devacc"], mine["nclasses"]) == (kit["acc"], kit["devacc"], 2)


@pytest.mark.parametrize("header, rows, words", [
    (["sentence1", "sentence2"], [("a", "b")], r"its header is sentence1, sentence2; an STS task needs the columns "
                                               "sentence1, sentence2, score"),
    (["sentence1", "sentence2", "score"], [], "no rows under its header"),
    (["sentence1", "sentence2", "score"], [("a", "b", "1"), ("c", "d", "high")],
     r"row 3: score 'high' is not a number"),
    (["sentence1", "sentence2", "score"], [("a", "", "1"), ("c", "d", "2")], "row 2: sentence2 is empty"),
    (["sentence1", "sentence2", "score"], [("a", "b", "1"), ("c", "d", "1")], "needs at least two pairs with "
                                                                              "different scores"),
    (["text", "label"], [("good", "pos"), ("fine", "pos")], "all 2 rows are labelled 'pos'; a classifier needs at "
                                                            "least two labels"),
    (["text", "label"], [("good", "pos")] * 12 + [("bad", "neg")] * 11, "label 'neg' has 11 rows; each label needs "
                                                                        "at least 12"),
])
def test_a_bad_task_file_is_one_line_naming_the_file_the_row_and_the_fix(tmp_path, header, rows, words):
    path = _write_csv(tmp_path / "mine.csv", header, rows)
    with pytest.raises(DataError, match=words) as refused:
        parse_user_task(f"mine={path}")
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(DataError, match="no such file"):
        parse_user_task(f"mine={tmp_path / 'absent.csv'}")
    with pytest.raises(DataError, match="name=path.csv"):
        parse_user_task(f"=:{path}")


def test_a_task_of_ones_own_is_stored_under_its_files_checksum(tmp_path, data_dir, counted):
    from cse_kit.results import Pretrained

    pairs = load_sts("STSBenchmark", "dev", data_dir)[:50]
    path = _write_csv(tmp_path / "pairs.csv", ["sentence1", "sentence2", "score"],
                      [(p.sent1, p.sent2, p.score) for p in pairs])
    store = ResultStore(tmp_path / "store", data_dir)
    subject = Pretrained("smoke-bert", "avg", "smoke")
    task = UserTask("mine", str(path))
    first = store.get(subject, (task,))["metrics"][task.evaluation]
    assert store.has(subject, (task,)) and first["kind"] == "sts"
    _write_csv(path, ["sentence1", "sentence2", "score"], [(p.sent1, p.sent2, p.score) for p in pairs[:40]])
    assert not store.has(subject, (task,))  # edited: evaluated again, under the new checksum
    assert store.get(subject, (task,))["metrics"][task.evaluation]["n"] == 40


def test_a_dev_set_of_ones_own_selects_the_checkpoint_and_joins_the_key(tmp_path, data_dir):
    pairs = load_sts("STSBenchmark", "dev", data_dir)[:60]
    path = _write_csv(tmp_path / "dev.csv", ["sentence1", "sentence2", "score"],
                      [(p.sent1, p.sent2, p.score) for p in pairs])
    cfg = build_config("simcse-bert", "smoke", {"dev_data": str(path), "output_dir": str(tmp_path / "run")})
    assert cfg.metric == "dev_data_spearman"
    key = record_key(cfg, data_dir)
    from cse_kit.train import train

    summary = train(cfg, progress=False)
    assert summary["metric"] == "dev_data_spearman" and np.isfinite(summary["best"])
    _write_csv(path, ["sentence1", "sentence2", "score"], [(p.sent1, p.sent2, p.score) for p in pairs[:50]])
    assert record_key(cfg, data_dir) != key
    with pytest.raises(ValueError, match="metric dev_data_spearman reads a dev set of your own: set dev_data"):
        TrainConfig(metric="dev_data_spearman")


# --- docs/extending.md ---------------------------------------------------------------------------------------------

BLOCK = re.compile(r"^```(\w+)(?: (\S+))?\n(.*?)^```", re.S | re.M)


def test_the_docs_code_blocks_run_verbatim(tmp_path, tmp_path_factory, data_dir):
    """Every block of docs/extending.md as written, in a fresh folder: the files it names are written, the entry
    point table names the module, and each command runs (the notebook with the repository's notebooks beside it).
    The shell's `cse-kit` and `papermill` are forked from the tests' server (tests/forked_python.py), as `python -m`
    runs them; test_readme runs the installed `cse-kit` itself."""
    import tomllib

    blocks = BLOCK.findall((REPO / "docs" / "extending.md").read_text())
    assert [kind for kind, _, _ in blocks] == ["python", "bash", "toml", "bash", "csv", "csv", "bash"]
    for kind, name, text in blocks:
        if name:
            (tmp_path / name).write_text(text)
    assert (tmp_path / "mymethod.py").read_text() == EXAMPLE.read_text()  # the doc shows the example itself
    entry = tomllib.loads(blocks[2][2])["project"]["entry-points"]["cse_kit.methods"]
    assert entry == {"margin-simcse": "mymethod"}
    (tmp_path / "notebooks").symlink_to(REPO / "notebooks")
    programs = tmp_path_factory.mktemp("bin")
    forked_python.launcher(programs, "cse-kit", "-m", "cse_kit.cli")
    forked_python.launcher(programs, "papermill", "-m", "papermill")
    env = {**os.environ, "CSE_KIT_DATA": str(data_dir), "CSE_KIT_RESULTS": str(tmp_path / "store"),
           "CSE_KIT_LOG_WITH": "none", "PATH": f"{programs}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # one shell for all, as a reader's terminal (the first block's export holds for the others)
    script = "\n".join(f"echo '=== block'\n{text}" for kind, _, text in blocks if kind == "bash")
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = done.stdout.split("=== block\n")[1:]
    assert "best stsb_spearman" in outputs[0]
    assert "best dev_data_spearman" in outputs[2] and "pairs" in outputs[2] and "topics" in outputs[2]
    import nbformat

    shown = "".join(str(o.get("data", {}).get("text/html", "")) + str(o.get("text", ""))
                    for c in nbformat.read(tmp_path / "your_method_smoke.ipynb", 4).cells
                    for o in c.get("outputs", []))
    assert "margin-simcse" in shown and "paired t-test over seeds" in shown and "Pareto front" in shown


@pytest.mark.parametrize("cluster", ["local", "slurm"])
def test_workers_and_slurm_jobs_train_a_plugin_method(cluster, request, tmp_path, data_dir, monkeypatch, own_methods):
    """The report's workers (two local processes) and a SLURM job on the suite's cluster import the method from
    $CSE_KIT_PLUGINS and train it under the key the submitter computed."""
    from cse_kit.results import parallel

    if cluster == "slurm":
        request.getfixturevalue("slurm")
    path = _plugin(tmp_path, f"worker_method_{cluster}")
    monkeypatch.setenv("CSE_KIT_PLUGINS", str(path))
    subjects = [build_config("simcse-bert", "smoke", {"seed": seed, "max_steps": 2, "eval_steps": 2,
                                                       "method": f"worker_method_{cluster}"}) for seed in (1, 2)]
    store = ResultStore(tmp_path / "results", data_dir)
    computed = parallel.compute_all(store, [(s, ("sts_dev",)) for s in subjects], workers=2 if cluster == "local"
                                    else 1, cluster=cluster, log=lambda *a: None)
    assert sorted(computed) == sorted(store.key(s) for s in subjects)
    text = "".join(p.read_text() for p in parallel.jobs_dir(store.root).glob("*_log.out"))
    assert text.count(f"worker_method_{cluster} (simcse-bert, smoke profile)") == 2  # each run trained by a worker


def test_a_run_of_ones_own_method_publishes_with_a_card_that_cites_no_paper_for_it(tmp_path, data_dir, own_methods):
    """`cse-kit publish` of a method of one's own: its card names it as one's own with its source digest, prints no
    paper's numbers beside it (its preset is SimCSE's, its method is not), and cites SimCSE as its baseline."""
    from huggingface_hub import ModelCard

    from cse_kit import publish

    registry.import_plugin(str(EXAMPLE))
    store = ResultStore(tmp_path / "store", data_dir)
    record = store.get(build_config("simcse-bert", "smoke", {"method": "margin-simcse", "seed": 1}), ("sts_test",))
    assert record["method_source"] == registry.method_digest(method_class("margin-simcse"))
    out = publish.publish(record["key"], tmp_path / "out", results_dir=store.root)
    card = ModelCard.load(out.folder / "README.md")
    assert "> **Not a paper's model.**" in card.content and "`margin-simcse`, a method of one's own" in card.content
    assert record["method_source"] in card.content and "Gao" in card.content  # SimCSE, its baseline, cited
    assert "Table 1" not in card.content  # SimCSE's printed row is not this method's
