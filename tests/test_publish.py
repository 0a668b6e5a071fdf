"""`cse-kit publish` (cse_kit.publish): a smoke DiffCSE run becomes a sentence-transformers model whose vectors
are the kit's, a smoke DiffAug run the kit's export with a card that says how to load it; each card parses as a
huggingface_hub ModelCard, its model-index reads back through huggingface_hub's eval-results reader with the record's
numbers, it shows mean ± std over the store's seeds of its configuration (a researcher's edited method's own seeds
only) beside the paper's number and says first that a smoke run is not the paper's model; a head-to-head record's
STS numbers come from its per-pair cosines; every file a card links is in its folder. MTEB results are laid out as
MTEB's results repository and read back by mteb's own reader. The push goes to a Hub API this test serves on loopback
(HF_ENDPOINT), which checks the files and the commit it receives; without a token, offline, unreachable or refused,
the command says so in one line and publishes nothing."""

import base64
import json
import os
import importlib.util
import re
import shlex
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from cse_kit import cli
from cse_kit import publish as pub
from cse_kit.experiments import STS_COLUMNS
from cse_kit.methods import registry
from cse_kit.results import ResultStore
from cse_kit.train import build_config
from cse_kit.train.presets import PRECISION_WORDS

import kit_process
from conftest import FLOAT64, REPO, cli_env
from test_extending import EXAMPLE, _plugin, own_methods  # noqa: F401 (a fixture)

STS_SENTENCES = 40


@pytest.fixture(scope="module")
def store(data_dir, tmp_path_factory):
    """A results store with smoke DiffCSE (seeds 1 and 2, STS and transfer tests; seed 1 with an MTEB task) and smoke
    DiffAug (seed 1, STS test)."""
    from test_mteb import sts_task

    root = tmp_path_factory.mktemp("store")
    s = ResultStore(root, data_dir)
    diffcse = [s.get(build_config("diffcse-bert-sts", "smoke", {"seed": seed}), ("sts_test", "transfer_fasttest"))
               for seed in (1, 2)]
    record, _ = s.get_mteb(diffcse[0]["key"], [sts_task(data_dir, sample=200)[0]])
    diffaug = s.get(build_config("diffaug-semi-bert", "smoke", {"seed": 1}), ("sts_test",))
    return s, {"diffcse": record, "diffcse2": diffcse[1], "diffaug": diffaug}


def sentences(data_dir) -> list[str]:
    from cse_kit.data import load_sts

    return [text for p in load_sts("STSBenchmark", "test", data_dir)[:STS_SENTENCES // 2] for text in (p.sent1, p.sent2)]


def front_matter_and_body(card: str) -> tuple[str, list[str]]:
    _, front, body = card.split("---\n", 2)
    return front, [line for line in body.splitlines() if line.strip()]


def relative_links(card: str) -> list[str]:
    """Every link of a card to a file beside it: the body's markdown links and images that name no scheme and no
    anchor, and the front matter's license_link."""
    _, front, body = card.split("---\n", 2)
    links = re.findall(r"\]\(([^)\s]+)", body) + re.findall(r"^license_link:\s*(\S+)", front, re.M)
    return [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:|#", link)]


def assert_ships_what_it_links(folder: Path) -> None:
    card = (folder / "README.md").read_text()
    for link in relative_links(card):
        assert (folder / link).exists(), f"the card links {link}, which its folder lacks"


def test_relative_links_finds_a_file_link_and_leaves_web_links_and_anchors():
    card = "---\nlicense: other\nlicense_link: LICENSE\n---\n[a](https://x.org) [b](#top) ![c](card.png) [d](mailto:x)\n"
    assert relative_links(card) == ["card.png", "LICENSE"]


def test_a_diffcse_run_is_a_sentence_transformers_model_with_the_kits_vectors_and_an_honest_card(store, data_dir,
                                                                                                 tmp_path, capsys):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results
    from sentence_transformers import SentenceTransformer

    s, records = store
    record = records["diffcse"]
    out = tmp_path / "diffcse"
    assert cli.main(["publish", record["key"], "--out", str(out), "--results-dir", str(s.root)]) == 0
    assert f"wrote {out}: a sentence-transformers model" in capsys.readouterr().out

    card = ModelCard.load(out / "README.md")
    data = card.data
    assert (data.library_name, data.pipeline_tag, data.license) == ("sentence-transformers", "sentence-similarity",
                                                                     "other")
    assert {"diffcse", "sentence-transformers", "cse-kit-profile-smoke", "arxiv:2204.10298"} <= set(data.tags)
    assert "mteb" not in data.tags  # a smoke run carries no leaderboard tag
    assert data.base_model is None and data.datasets == ["princeton-nlp/datasets-for-simcse"]
    name, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert "smoke profile: not the DiffCSE paper's model" in name
    found = {(r.dataset_config, r.metric_type): r.metric_value for r in results}
    sts = pub.sts_values(record, data_dir)
    for task, column in STS_COLUMNS.items():
        assert found[(task, "spearmanr")] == round(sts[column], 4)
    evaluation, transfer = pub.transfer_values(record)
    assert found[("MR", "accuracy")] == round(transfer["MR"], 4)
    main = record["metrics"]["mteb"]["LocalSTSBenchmark"]
    assert found[("default", "cosine_spearman")] == round(100 * main["main_score"], 4)

    front, body = front_matter_and_body(card.content)
    assert body[0].startswith("# cse-kit/diffcse-bert-sts-smoke-seed1") and \
        body[1].startswith("> **Not the DiffCSE paper's model.** A `smoke`-profile run")
    text = "\n".join(body)
    both = [pub.sts_values(r, data_dir)["Avg."] for r in (record, records["diffcse2"])]
    assert f"{np.mean(both):.2f} ± {np.std(both, ddof=1):.2f}" in text  # over the store's two seeds
    assert "| paper | 72.28 | 84.43 | 76.47 | 83.90 | 80.54 | 80.59 | 71.23 | 78.49 |" in text
    assert "which are printed beside them for reference only" in text
    assert "reproduces voidism/DiffCSE" in text  # the official-code variant names its script
    assert record["code_version"] in text and record["key"] in text and "@inproceedings{chuang2022diffcse" in text
    assert "@inproceedings{gao2021simcse" in text
    assert "`max_examples=128` (paper: None)" in text and "scd_projector" not in text

    model = SentenceTransformer(str(out), device="cpu")
    theirs = model.encode(sentences(data_dir), convert_to_numpy=True)
    ours = s.encoder(record).encode(sentences(data_dir))
    assert np.abs(theirs - ours).max() <= 1e-6 * np.abs(ours).max()
    assert (out / "cse_kit.json").is_file()  # cse-kit eval reads the pooler from the folder too
    assert "license_link" not in front and "license_name: unknown" in front  # licence other: no LICENSE shipped
    assert_ships_what_it_links(out)


def test_the_mteb_results_are_in_the_results_repositorys_layout_and_mtebs_reader_loads_them(store, tmp_path):
    import mteb

    s, records = store
    record = records["diffcse"]
    out = pub.publish(record["key"], tmp_path / "pub", results_dir=s.root, repo_id="my-org/diffcse-smoke")
    revision = out.mteb / "my-org__diffcse-smoke" / record["key"]
    assert sorted(p.name for p in revision.iterdir()) == ["LocalSTSBenchmark.json", "model_meta.json"]
    cache = tmp_path / "cache"
    (cache / "results").mkdir(parents=True)
    os.symlink(out.mteb / "my-org__diffcse-smoke", cache / "results" / "my-org__diffcse-smoke")
    loaded = mteb.ResultCache(cache).load_results(require_model_meta=True, include_remote=False)
    [model] = loaded.model_results
    assert (model.model_name, model.model_revision) == ("my-org/diffcse-smoke", record["key"])
    [task] = model.task_results
    assert task.task_name == "LocalSTSBenchmark"
    assert task.get_score() == record["metrics"]["mteb"]["LocalSTSBenchmark"]["main_score"]
    meta = json.loads((revision / "model_meta.json").read_text())
    assert meta["embed_dim"] == 32 and meta["similarity_fn_name"] == "cosine" and "chuang2022diffcse" in meta["citation"]
    assert 'SentenceTransformer("my-org/diffcse-smoke")' in out.card


def test_a_diffaug_run_is_the_kits_export_and_its_cards_code_loads_it(store, data_dir, tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    s, records = store
    record = records["diffaug"]
    out = pub.publish(str(s.run_dir(record["key"]) / "model"), tmp_path / "diffaug")  # the store found from the path
    assert out.kind == "transformers" and out.mteb is None
    assert (out.folder / "prefix.safetensors").is_file() and not (out.folder / "modules.json").exists()
    card = ModelCard.load(out.folder / "README.md")
    assert card.data.library_name == "transformers"
    _, results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert [r.metric_value for r in results] == [round(v, 4) for k, v in pub.sts_values(record, data_dir).items()
                                                 if k != "Avg."]
    assert_ships_what_it_links(out.folder)
    _, body = front_matter_and_body(card.content)
    assert body[1].startswith("> **Not the DiffAug paper's model.**")
    assert "DiffAug Table 1, DiffAug (ours) (semi-supervised, w/o aux loss)" in card.content
    assert "learned prefix" in card.content and "@inproceedings{jiang2022promptbert" in card.content

    [code] = re.findall(r"```python\n(.*?)```", card.content, re.S)
    code = code.replace('path = "path/to/this/folder"', f'path = "{out.folder}"')
    namespace = {}
    exec(code, namespace)  # the card's own instructions
    encoder = namespace["encoder"]
    assert np.array_equal(encoder.encode(sentences(data_dir)), s.encoder(record).encode(sentences(data_dir)))


def train_outside_a_store(run: Path, data_dir, *settings: str) -> dict:
    """`cse-kit train` of smoke SimCSE (and `--set` settings) into run; its summary.json."""
    argv = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--output-dir", str(run), "--data-dir",
            str(data_dir), "--no-progress", "--log-with", "none"]
    assert cli.main(argv + [arg for setting in settings for arg in ("--set", setting)]) == 0
    return json.loads((run / "summary.json").read_text())


def test_a_run_trained_outside_a_store_is_published_with_its_dev_score_in_true_sentences(data_dir, tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    run = tmp_path / "run"
    summary = train_outside_a_store(run, data_dir)
    assert summary["method_source"] is None  # the kit's own method
    out = pub.publish(str(run), tmp_path / "out")
    card = ModelCard.load(out.folder / "README.md")
    _, [result] = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert (result.dataset_split, result.metric_value) == ("validation", round(summary["best"], 4))
    assert "no test evaluation" in card.content and out.kind == "sentence-transformers"
    text = card.content
    # the command a reader can run: the folder they downloaded, not the run's bare `model`
    assert "Test it with `cse-kit eval --model path/to/this/folder --tasks all --mode test`" in text
    assert "--model model " not in text
    assert "Its numbers are not comparable to the paper's." in text and "printed beside them" not in text
    assert f"in {PRECISION_WORDS[summary['mixed_precision']]};" in text and "precision no" not in text
    assert (summary["environment"].get("cpu_model") or summary["environment"].get("gpu")) in text
    assert_ships_what_it_links(out.folder)
    named = pub.publish(str(run / "model"), tmp_path / "named", repo_id="my-org/simcse-smoke").card
    assert "Test it with `cse-kit eval --model my-org/simcse-smoke --tasks all --mode test`" in named


def test_a_plugin_run_trained_outside_a_store_names_its_source_digest(data_dir, tmp_path, own_methods):
    from cse_kit.methods import method_class

    registry.import_plugin(str(EXAMPLE))
    run = tmp_path / "run"
    summary = train_outside_a_store(run, data_dir, "method=margin-simcse", "max_steps=2", "eval_steps=2")
    assert summary["method_source"] == registry.method_digest(method_class("margin-simcse"))
    card = pub.publish(str(run), tmp_path / "out").card
    assert f"its source's digest, as the run's summary.json holds it: `{summary['method_source']}`." in card
    assert "not stored" not in card


def test_a_head_to_head_records_sts_numbers_come_from_its_per_pair_cosines_and_equal_its_sts_test(data_dir,
                                                                                                  tmp_path):
    """The head-to-head (papers.comparison) stores every STS test pair's cosine, not the STS test: the card shows the
    numbers those cosines give, which are the STS test's to 1e-12 where a record holds both from one encoding (whole
    test sets: a run of no profile, which samples none), and averages them over seeds with the STS test's."""
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    s = ResultStore(tmp_path / "store", data_dir)

    def subject(seed: int):
        return build_config("simcse-bert", "smoke", {"seed": seed, "profile": None, "max_steps": 2, "eval_steps": 2})

    notebook = s.get(subject(1), ("sts_test",))  # the STS test, and each pair's cosine from the same encoding
    head_to_head = s.get(subject(2), ("sts_pairs",))
    assert "sts_pairs" in notebook["metrics"] and "sts_test" not in head_to_head["metrics"]
    pairs_only = {**notebook, "metrics": {k: v for k, v in notebook["metrics"].items() if k != "sts_test"}}
    from_test, from_pairs = pub.sts_values(notebook, data_dir), pub.sts_values(pairs_only, data_dir)
    assert from_test.keys() == from_pairs.keys() == {*STS_COLUMNS.values(), "Avg."}
    for column, value in from_test.items():
        assert from_pairs[column] == pytest.approx(value, abs=FLOAT64), column

    out = pub.publish(head_to_head["key"], tmp_path / "pairs", results_dir=s.root)
    card = ModelCard.load(out.folder / "README.md")
    assert "**STS test**" in card.content and "no test evaluation" not in card.content
    _, results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    values = pub.sts_values(head_to_head, data_dir)
    assert [r.metric_value for r in results] == [round(v, 4) for k, v in values.items() if k != "Avg."]
    both = [values["Avg."], from_test["Avg."]]
    assert "| over seeds |" in card.content and f"{np.mean(both):.2f} ± {np.std(both, ddof=1):.2f}" in card.content


def test_the_card_of_an_edited_methods_run_averages_its_own_seeds_only(data_dir, tmp_path, own_methods):
    """A researcher's method trained with seeds 1 and 2, one line of its loss edited, trained again with seed 1: the
    new run's card is of its one seed; the old version's cards still average their two."""
    path = _plugin(tmp_path, "edited_for_card")
    registry.import_plugin(str(path))
    s = ResultStore(tmp_path / "store", data_dir)

    def trained(seed: int) -> dict:
        settings = {"seed": seed, "method": "edited_for_card", "max_steps": 2, "eval_steps": 2}
        return s.get(build_config("simcse-bert", "smoke", settings), ("sts_test",))

    old = [trained(1), trained(2)]
    _plugin(tmp_path, "edited_for_card", "cos = a @ b.T - 2 * self.options.margin")  # one line of the loss
    spec = importlib.util.spec_from_file_location("edited_for_card", path)
    spec.loader.exec_module(sys.modules["edited_for_card"])  # the module as a new process would import it
    new = trained(1)
    assert new["key"] != old[0]["key"] and new["method_source"] != old[0]["method_source"]

    card = pub.publish(new["key"], tmp_path / "new", results_dir=s.root).card
    assert "the only seed of this configuration in the results store" in card and "| over seeds |" not in card
    assert new["method_source"] in card and old[0]["method_source"] not in card
    card = pub.publish(old[0]["key"], tmp_path / "old", results_dir=s.root).card
    assert "over the 2 seeds of the same configuration in the results store (1, 2)" in card


def test_a_notebook_publishes_a_table_rows_run_and_lists_the_command_of_each(store, data_dir, tmp_path):
    from cse_kit import experiments as ex
    from cse_kit.papers import diffcse

    s, records = store
    setup = ex.setup("smoke", [1, 2], str(data_dir), str(s.root))
    long = ex.run_rows(diffcse.table1_rows(["bert"], "smoke"), setup, ("sts_test",), ex.sts_test_columns)
    lines = pub.commands(long, setup, out="shared")
    assert [line for line in lines if line.startswith("DiffCSE")] == [
        f"DiffCSE-BERT-base, seed {seed}: cse-kit publish {r['key']} --results-dir {s.root} --out "
        f"shared/diffcse-bert-base-seed{seed}" for seed, r in ((1, records["diffcse"]), (2, records["diffcse2"]))]
    assert len(lines) == 4 and "--out shared/simcse-bert-base-reproduce-seed1" in lines[0]  # SimCSE trained here
    done = pub.row(long, "DiffCSE-BERT-base", setup, tmp_path / "row", seed=2)
    assert records["diffcse2"]["key"] in done.card and done.kind == "sentence-transformers"
    with pytest.raises(pub.PublishError, match="no finished run of row 'DiffCSE'"):
        pub.row(long, "DiffCSE", setup, tmp_path / "none")


def test_what_cannot_be_published_is_refused_in_one_line(store, tmp_path, capsys):
    s, records = store
    for argv, words in (
            (["publish", "0123456789abcdef0123", "--out", str(tmp_path / "x"), "--results-dir", str(s.root)],
             "no record 0123456789abcdef0123"),
            (["publish", str(tmp_path), "--out", str(tmp_path / "x")], "is not a trained run"),
            (["publish", records["diffcse"]["key"], "--out", str(tmp_path / "x"), "--results-dir", str(s.root),
              "--push"], "--push needs --repo-id ORG/NAME"),
            (["publish", records["diffcse"]["key"], "--out", str(tmp_path / "x"), "--results-dir", str(s.root),
              "--repo-id", "no-slash"], "is not ORG/NAME")):
        assert cli.main(argv) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("cse-kit: error:") and words in line, line
    assert not (tmp_path / "x").exists()


def test_every_papers_row_a_preset_stands_for_is_printed_and_every_method_is_cited():
    from cse_kit.train.presets import PRESETS

    cited = pub.citations()
    for preset, rows in pub.PAPER_ROWS.items():
        assert preset in PRESETS
        kinds = {kind for kind in ("sts", "transfer") if pub.paper_numbers(preset, kind)}
        assert len(kinds) == len(rows), preset
    for method, (paper, baselines) in pub.METHOD_PAPERS.items():
        assert all(k in cited and cited[k]["bibtex"].startswith("@inproceedings{") for k in (paper, *baselines))
    assert set(pub.METHOD_PAPERS) == {method for _, settings in PRESETS.values() for method in [settings["method"]]}


# --- the push ------------------------------------------------------------------------------------------------------
class Hub(BaseHTTPRequestHandler):
    """The Hub API calls huggingface_hub makes for create_repo and create_commit, answered on loopback; what it
    receives is kept on the server (`repos`, `commits`). `fail_commit`: answer the commit with 500."""

    def log_message(self, *args):
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server = self.server
        if self.headers.get("Authorization") != "Bearer hf_test_token":
            return self._json(401, {"error": "Invalid credentials"})
        if self.path == "/api/validate-yaml":  # huggingface_hub asks the Hub to check a README's front matter
            from huggingface_hub import ModelCard

            server.validated.append(ModelCard(json.loads(body)["content"]).data.to_dict())
            return self._json(200, {"errors": [], "warnings": []})
        if self.path == "/api/repos/create":
            server.repos.append(json.loads(body))
            return self._json(200, {"url": f"{server.endpoint}/my-org/diffcse-smoke"})
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(preupload|commit)/main(\?.*)?", self.path)
        if match and match[2] == "preupload":
            files = json.loads(body)["files"]
            return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in files]})
        if match and match[2] == "commit":
            if server.fail_commit:
                return self._json(500, {"error": "Internal Error"})
            lines = [json.loads(line) for line in body.decode().splitlines() if line]
            server.commits.append({"repo": match[1], "header": lines[0]["value"],
                                   "files": {e["value"]["path"]: base64.b64decode(e["value"]["content"])
                                             for e in lines[1:] if e["key"] == "file"}})
            oid = "a" * 40
            return self._json(200, {"commitUrl": f"{server.endpoint}/{match[1]}/commit/{oid}", "commitOid": oid})
        return self._json(404, {"error": f"not served here: {self.path}"})


@pytest.fixture
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    server.endpoint = f"http://127.0.0.1:{server.server_port}"
    server.repos, server.commits, server.validated, server.fail_commit = [], [], [], False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def cse_kit(args: list[str], **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in cli_env().items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    return kit_process.run(args, env={**environment, **env},
                           capture_output=True, text=True, timeout=300, cwd=REPO)


def test_the_push_command_keeps_every_option_given():
    assert pub.push_command("runs/my run", "out", repo_id="my-org/x") == \
        "cse-kit publish 'runs/my run' --out out --repo-id my-org/x --push"
    assert pub.push_command("0123", "o", repo_id="a/b", results_dir="lab store", license="mit", st=False,
                            private=True) == \
        "cse-kit publish 0123 --out o --repo-id a/b --results-dir 'lab store' --license mit --no-st --push --private"


def test_the_push_uploads_the_folder_in_one_commit_to_the_hub_api(store, hub, tmp_path):
    s, records = store
    out = tmp_path / "pushed"
    written = cse_kit(["publish", records["diffcse"]["key"], "--out", str(out), "--repo-id", "my-org/diffcse-smoke",
                       "--results-dir", str(s.root), "--private"])
    [command] = [line.removeprefix("push it: ") for line in written.stdout.splitlines() if line.startswith("push it")]
    assert command == pub.push_command(records["diffcse"]["key"], out, repo_id="my-org/diffcse-smoke",
                                       results_dir=s.root, private=True)
    done = cse_kit(shlex.split(command)[1:],  # the command a publish without --push printed to push it, as printed
                   HF_ENDPOINT=hub.endpoint, HF_TOKEN="hf_test_token", HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"published my-org/diffcse-smoke (private): {hub.endpoint}/my-org/diffcse-smoke/commit/{'a' * 40}" in \
        done.stdout
    [created] = hub.repos
    assert (created["name"], created["organization"], created["visibility"]) == ("diffcse-smoke", "my-org", "private")
    [commit] = hub.commits
    assert commit["repo"] == "my-org/diffcse-smoke" and commit["header"]["summary"] == "cse-kit publish: pushed"
    [validated] = hub.validated
    assert validated["model-index"][0]["name"].startswith("my-org/diffcse-smoke (smoke profile")
    written = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert commit["files"] == written  # every file, byte for byte, in the one commit
    assert {"README.md", "model.safetensors", "modules.json"} <= set(written)
    assert any(path.startswith("mteb_results/my-org__diffcse-smoke/") for path in written)


def test_without_a_token_offline_unreachable_or_refused_it_says_so_in_one_line_and_publishes_nothing(
        store, hub, tmp_path, monkeypatch, capsys):
    s, records = store
    key = records["diffaug"]["key"]
    out = tmp_path / "folder"
    done = cse_kit(["publish", key, "--out", str(out), "--results-dir", str(s.root), "--repo-id", "my-org/x",
                    "--push"], HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "home"))
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("cse-kit: not published: no Hugging Face token: run `hf auth login`") and str(out) in line
    assert done.stdout.startswith(f"wrote {out}") and not hub.repos and not hub.commits

    from huggingface_hub import constants

    from cse_kit.models import hub_unreachable

    argv = ["publish", key, "--out", str(out), "--results-dir", str(s.root), "--repo-id", "my-org/x", "--push"]
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cases = [("HF_HUB_OFFLINE=1 is set", None, False)]
    with __import__("socket").socket() as closed:
        closed.bind(("127.0.0.1", 0))
        cases.append((f"the Hub cannot be reached (http://127.0.0.1:{closed.getsockname()[1]}",
                      f"http://127.0.0.1:{closed.getsockname()[1]}", False))
        cases.append(("the Hub answered 500", hub.endpoint, True))
        for words, endpoint, fail in cases:
            if endpoint:
                monkeypatch.setenv("HF_HUB_OFFLINE", "0")
                monkeypatch.setattr(constants, "ENDPOINT", endpoint)
            hub.fail_commit = fail
            hub_unreachable.cache_clear()  # asked once a process
            assert cli.main(argv) == 2
            [line] = capsys.readouterr().err.splitlines()
            assert line.startswith("cse-kit: not published: ") and words in line and str(out) in line, line
    assert not hub.commits


def test_a_plugin_method_gets_a_semi_supervised_strategy_gradient_caching_and_its_own_citation(data_dir, tmp_path,
                                                                                              own_methods):
    """A researcher's method gets what the kit's get: a semi-supervised strategy around it (--set semi_strategy),
    its step cached (--set grad_cache), and the paper and BibTeX its class declares on the published card."""
    path = _plugin(tmp_path, "cited_margin")
    path.write_text(path.read_text().replace('class Method(Objective):\n', 'class Method(Objective):\n'
                                             '    paper = "Margins for SimCSE (2026)"\n'
                                             '    citation = "@article{margin2026, title={Margins for SimCSE}}"\n'))
    registry.import_plugin(str(path))
    run = tmp_path / "run"
    summary = train_outside_a_store(run, data_dir, "method=cited_margin", "cited_margin.margin=0.2", "max_steps=2",
                                    "eval_steps=2", "semi_strategy=sup-joint", "nli_data=SNLI-triplets",
                                    "stage1_steps=2", "aux_weight=0.1", "grad_cache=4")
    config = summary["config"]
    assert (config["semi_strategy"], config["grad_cache"], config["method_options"]["margin"]) == ("sup-joint", 4, 0.2)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert {r.get("stage") for r in log if "loss" in r} >= {1} and any("nli" in r for r in log if r.get("stage") != 1)
    card = pub.publish(str(run), tmp_path / "out").card
    assert "`cited_margin`, a method of one's own (Margins for SimCSE (2026)), as its class cites it:" in card
    assert "@article{margin2026, title={Margins for SimCSE}}" in card
