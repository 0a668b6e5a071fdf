"""The mini profile's models (Google's BERT miniatures) from a Hub on loopback (tests/hub_on_loopback.py) serving
random-weight stand-ins of them as their Hub repositories hold them: downloaded into an empty cache and read back
from it offline, `--profile auto`'s choice with and without them, the one-line refusal when they can be had
neither way, and their config.json without model_type."""

import json
import subprocess
import sys
from collections import Counter

import pytest
import torch
from conftest import REPO
from hub_on_loopback import closed_endpoint, commit_of, hub_env, mini_standins, serve_repos

from cse_kit.models import load_model
from cse_kit.models.miniatures import NAME, bert_config_where_untyped, config_dict
from cse_kit.models.standins import STANDIN_FILES, write_standin
from cse_kit.train.presets import hub_models

MINI = hub_models("mini")
TINY = "google/bert_uncased_L-2_H-128_A-2"  # BERT-Tiny, the smallest of them
#: bert-base-uncased's ids of "Hello World" (lower-cased: "hello", "world")
HELLO_WORLD = [101, 7592, 2088, 102]

#: run in a subprocess (the Hub's address, offline mode and the cache are read from the environment at import):
#: loads each model of argv[1] ({repo_id: stand-in folder}) as the kit does, the encoder and the masked LM, and says
#: what came back, compared with the stand-in's weights
LOAD = r"""
import json, sys
from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM

from cse_kit.models import in_hub_cache, load_model, newly_initialized

report = {}
for ref, folder in json.loads(sys.argv[1]).items():
    saved = torch.load(Path(folder) / "pytorch_model.bin", weights_only=True)
    tokenizer, encoder = load_model(ref)
    _, mlm = load_model(ref, model_class=AutoModelForMaskedLM)
    head = {k: v for k, v in mlm.state_dict().items() if k.startswith("cls.predictions.")}
    config = encoder.config
    report[ref] = {
        "encoder": type(encoder).__name__, "mlm": type(mlm).__name__,
        "shape": [config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size,
                  config.vocab_size],
        "encoder_as_saved": sorted(k for k, v in encoder.state_dict().items() if torch.equal(v, saved["bert." + k])),
        "encoder_weights": sorted(encoder.state_dict()),
        "head_as_saved": sorted(k for k, v in head.items() if torch.equal(v, saved[k])),
        "head_weights": sorted(head),
        "newly_initialized": sorted(newly_initialized(encoder) | newly_initialized(mlm)),
        "tokenizer": type(tokenizer).__name__, "vocab": len(tokenizer),
        "hello_world": tokenizer("Hello World")["input_ids"], "tokens": tokenizer.tokenize("Hello World"),
        "in_hub_cache": in_hub_cache(ref),
    }
print(json.dumps(report))
"""

AUTO = "from cse_kit.experiments import auto_profile; import json; print(json.dumps(auto_profile()))"


def python(code: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600,
                          cwd=REPO, check=False)


def loaded(env: dict, repos: dict) -> dict:
    done = python(LOAD, env, json.dumps({ref: str(folder) for ref, folder in repos.items()}))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def auto(env: dict) -> tuple[str, str]:
    done = python(AUTO, env)
    assert done.returncode == 0, done.stderr[-4000:]
    profile, why = json.loads(done.stdout.splitlines()[-1])
    return profile, why


@pytest.fixture(scope="session")
def standins(tmp_path_factory):
    """{repo_id: folder}: the stand-ins of the five models the mini profile downloads (written once, ~7 s)."""
    return mini_standins(tmp_path_factory.mktemp("hub-repos"))


@pytest.fixture(scope="module")
def downloaded(standins, tmp_path_factory):
    """The five models loaded with load_model (encoder and masked LM) into an empty Hugging Face home from the Hub
    on loopback, which is stopped after: (home, what the loads said, the Hub with what it was asked)."""
    home = tmp_path_factory.mktemp("hf-home")
    with serve_repos(standins) as hub:
        report = loaded(hub.env(home), standins)
    return home, report, hub


def assert_the_miniatures(report: dict) -> None:
    assert list(report) == MINI
    for ref, got in report.items():
        values = config_dict(ref)
        assert (got["encoder"], got["mlm"]) == ("BertModel", "BertForMaskedLM"), ref
        assert got["shape"] == [values["num_hidden_layers"], values["hidden_size"], values["hidden_size"] // 64,
                                4 * values["hidden_size"], 30522], ref
        assert got["shape"][:3] == [int(NAME.match(ref)[k]) for k in ("layers", "hidden", "heads")], ref
        # every weight from the checkpoint: the encoder (its NSP pooler too) and the MLM head, nothing random
        assert got["encoder_as_saved"] == got["encoder_weights"] and "pooler.dense.weight" in got["encoder_weights"]
        assert got["head_as_saved"] == got["head_weights"] and "cls.predictions.transform.dense.weight" in \
            got["head_weights"], ref
        assert got["newly_initialized"] == [], ref
        # bert-base-uncased's tokenizer: lower-cases, its 30,522 word pieces
        assert got["tokenizer"].startswith("Bert") and got["vocab"] == 30522, ref
        assert got["hello_world"] == HELLO_WORLD and got["tokens"] == ["hello", "world"], ref
        assert got["in_hub_cache"] is True, ref


def test_the_mini_models_download_into_an_empty_cache_with_their_shapes_and_mlm_heads(downloaded):
    home, report, hub = downloaded
    assert_the_miniatures(report)
    # each repository's three files, each fetched once (the second load of a model is served from the cache)
    sent = Counter(hub.downloads())
    assert sent == Counter({(ref, name): 1 for ref in MINI for name in STANDIN_FILES}), sent
    for ref in MINI:
        snapshot = home / "hub" / f"models--{ref.replace('/', '--')}" / "snapshots" / commit_of(ref)
        assert sorted(p.name for p in snapshot.iterdir()) == sorted(STANDIN_FILES), ref
        # files transformers looked for that the repository lacks: answered EntryNotFound, their absence cached
        absent = home / "hub" / f"models--{ref.replace('/', '--')}" / ".no_exist" / commit_of(ref)
        assert {"model.safetensors", "tokenizer_config.json"} <= {p.name for p in absent.iterdir()}, ref
    # the kit asked whether the Hub answers (cse_kit.models.hub_unreachable) before the first download
    first_get = next(i for i, (method, path) in enumerate(hub.requests) if method == "GET" and "/resolve/" in path)
    assert ("HEAD", "/") in hub.requests[:first_get], hub.requests[:first_get]
    # nor did transformers' safetensors auto-conversion of pickled weights start: it looks up the repository's
    # commits and discussions to ask a Hub Space for a pull request on it (the kit sets DISABLE_SAFETENSORS_CONVERSION)
    asked = [path for _, path in hub.requests if path.endswith("/commits/main") or "/discussions" in path]
    assert not asked, asked


def test_the_downloaded_mini_models_load_from_the_cache_offline_with_the_hub_stopped(downloaded, standins):
    home, online, _ = downloaded
    # the Hub that sent them is stopped; HF_HUB_OFFLINE=1 pointed at a Hub serving nothing, which is asked nothing
    with serve_repos({}) as empty:
        report = loaded(empty.env(home, offline=True), standins)
    assert_the_miniatures(report)
    assert report == online and empty.requests == []


def test_cached_mini_models_load_without_the_hub_and_without_offline_mode(downloaded, standins):
    """The cache copied to a machine without internet and HF_HUB_OFFLINE not set (where `--profile auto` picks mini,
    test_auto_picks_mini_when_the_models_are_cached): the models load from the cache, at once. Read as online,
    transformers' tokenizer lists the repository twice (chat templates, a sentencepiece model), each listing retried
    5 times over ~23 s before it falls back to the cache: ~48 s a load_model, so load_model reads a cached model as
    offline when the Hub does not answer."""
    import time

    home, online, _ = downloaded
    start = time.perf_counter()
    report = loaded(hub_env(closed_endpoint(), home, offline=False), {TINY: standins[TINY]})
    elapsed = time.perf_counter() - start
    assert report == {TINY: online[TINY]}
    assert elapsed < 30, f"a cached model took {elapsed:.0f} s to load with the Hub unreachable"


def test_auto_picks_mini_when_the_hub_answers_and_downloads_nothing_itself(standins, tmp_path):
    with serve_repos(standins) as hub:
        profile, why = auto(hub.env(tmp_path / "empty-home"))
    assert profile == "mini", why
    assert why.startswith("profile mini (auto: no CUDA GPU; the Hub answers") and "5 miniature(s)" in why, why
    assert ("HEAD", "/") in hub.requests and hub.downloads() == []
    assert not [r for r in hub.requests if "/resolve/" in r[1]], hub.requests
    assert not (tmp_path / "empty-home" / "hub").exists()


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE=1", "no-Hub-without-offline-mode"])
def test_auto_picks_mini_when_the_models_are_cached(downloaded, offline):
    home, _, _ = downloaded
    profile, why = auto(hub_env(closed_endpoint(), home, offline=offline))
    assert profile == "mini", why
    assert why.startswith("profile mini (auto: no CUDA GPU; the mini profile's masked-LM miniatures are in the "
                          "Hugging Face cache"), why


def test_models_whose_weights_never_reached_the_cache_are_not_counted_as_cached(standins, tmp_path):
    """A download stopped during the weights (the 160 MB of BERT-Medium): the configs and vocabularies are in the
    cache, the weights not. Offline, `auto` must not pick mini (its every notebook would fail at the load):
    cse_kit.models.in_hub_cache asks for the weights too."""
    home = tmp_path / "home"
    fetch = ("import sys\nfrom huggingface_hub import hf_hub_download\n"
             "for ref in sys.argv[1:]:\n    hf_hub_download(ref, 'config.json'); hf_hub_download(ref, 'vocab.txt')")
    with serve_repos(standins) as hub:
        done = python(fetch, hub.env(home), *MINI)
    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(hub.downloads()) == sorted((ref, name) for ref in MINI for name in ("config.json", "vocab.txt"))
    profile, why = auto(hub_env(closed_endpoint(), home, offline=True))
    assert profile == "cpu" and "offline mode is on (HF_HUB_OFFLINE=1)" in why, why


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE=1", "Hub-unreachable"])
def test_auto_picks_cpu_saying_why_when_the_models_are_neither_cached_nor_downloadable(tmp_path, offline):
    endpoint = closed_endpoint()
    profile, why = auto(hub_env(endpoint, tmp_path / "empty-home", offline=offline))
    assert profile == "cpu", why
    assert why.startswith("profile cpu (auto: no CUDA GPU, and the mini profile's miniatures are neither cached nor "
                          "downloadable: ") and why.endswith("; --profile mini once they are)"), why
    reason = "offline mode is on (HF_HUB_OFFLINE=1)" if offline else f"{endpoint}: ConnectError"
    assert reason in why and len(why.splitlines()) == 1, why


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE=1", "Hub-unreachable"])
@pytest.mark.parametrize("command", ["report", "train"])
def test_the_mini_profile_without_its_models_stops_in_one_line_naming_them_before_running_anything(
        tmp_path, command, offline):
    out, results, data, run = (tmp_path / name for name in ("report", "results", "data", "run"))
    args = {"report": ["report", "--profile", "mini", "--out", str(out), "--results-dir", str(results),
                       "--data-dir", str(data)],
            "train": ["train", "--preset", "simcse-bert", "--profile", "mini", "--output-dir", str(run),
                      "--data-dir", str(data), "--no-progress"]}[command]
    endpoint = closed_endpoint()
    done = subprocess.run([sys.executable, "-m", "cse_kit.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, check=False, env=hub_env(endpoint, tmp_path / "empty-home", offline=offline,
                                                CSE_KIT_RESULTS=results, CSE_KIT_DATA=data))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-4000:]
    [line] = done.stderr.splitlines()
    assert line.startswith("cse-kit: error: the mini profile needs ") and all(ref in line for ref in MINI), line
    assert ("offline mode is on (HF_HUB_OFFLINE=1)" if offline else f"{endpoint}: ConnectError") in line, line
    assert done.stdout == ""
    # nothing ran: no notebook executed, no report, no run folder, no record, no download
    assert not [p for p in (out, run, data, results) if p.exists()], sorted(tmp_path.rglob("*"))
    assert not (tmp_path / "empty-home" / "hub").exists()


def test_a_miniatures_config_without_model_type_is_read_as_bert_and_one_with_it_is_left_to_transformers(tmp_path):
    from transformers import BertConfig, BertModel

    from cse_kit.models import _untyped_config

    untyped = write_standin(TINY, tmp_path / "untyped")
    written = (untyped / "config.json").read_bytes()
    assert "model_type" not in json.loads(written)  # as the 2020 upload
    config = bert_config_where_untyped(untyped)
    assert isinstance(config, BertConfig) and (config.num_hidden_layers, config.hidden_size) == (2, 128)
    # a config override goes into the config the kit makes, as from_pretrained applies it to one it reads
    overrides = {"hidden_dropout_prob": 0.0, "add_pooling_layer": False}
    made = _untyped_config(str(untyped), str(untyped), True, True, overrides)
    assert made["config"].hidden_dropout_prob == 0.0 and overrides == {"add_pooling_layer": False}
    tokenizer, model = load_model(str(untyped), offline=True, hidden_dropout_prob=0.0)
    saved = torch.load(untyped / "pytorch_model.bin", weights_only=True)
    assert type(model) is BertModel and model.config.hidden_dropout_prob == 0.0
    assert all(torch.equal(v, saved["bert." + k]) for k, v in model.state_dict().items())
    assert tokenizer("Hello World")["input_ids"] == HELLO_WORLD
    assert (untyped / "config.json").read_bytes() == written  # read, not rewritten

    typed = tmp_path / "typed"
    model.save_pretrained(typed)
    tokenizer.save_pretrained(typed)
    written = (typed / "config.json").read_bytes()
    assert json.loads(written)["model_type"] == "bert"
    assert bert_config_where_untyped(typed) is None
    overrides = {"hidden_dropout_prob": 0.0}
    assert _untyped_config(str(typed), str(typed), True, True, overrides) == {} and overrides == {
        "hidden_dropout_prob": 0.0}
    _, again = load_model(str(typed), offline=True, hidden_dropout_prob=0.3)
    assert type(again) is BertModel and again.config.hidden_dropout_prob == 0.3
    assert (typed / "config.json").read_bytes() == written
    # a Hub id that is not a miniature is left to transformers without a look at its files
    assert _untyped_config("bert-base-uncased", "bert-base-uncased", False, True, {}) == {}
