"""Every notebook on the mini profile's miniatures, downloaded from a Hub on loopback that serves same-configured
random-weight stand-ins (their exact shapes, MLM heads and vocabulary; tests/hub_on_loopback.py), at the smoke
profile's sizes (`mini-rehearsal`: the mini profile's own budget is a working day on 8 cores), then a mini run
with the Hub gone: its models read from the cache the report filled."""

import json
import subprocess

import pytest

from cse_kit import report
from cse_kit.train.presets import hub_models

from hub_on_loopback import mini_standins, serve_repos


@pytest.mark.slow
def test_every_notebook_runs_on_the_miniatures_from_the_hub_then_offline(tmp_path, data_dir):
    repos = mini_standins(tmp_path / "standins")
    out, results = tmp_path / "report", tmp_path / "results"
    command = ["cse-kit", "report", "--profile", "mini-rehearsal", "--out", str(out), "--results-dir", str(results),
               "--data-dir", str(data_dir)]
    with serve_repos(repos) as hub:
        env = hub.env(tmp_path / "hf-home", TQDM_DISABLE="1")
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        downloaded = {repo for repo, name in hub.downloads() if name == "pytorch_model.bin"}
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    runs = json.loads((out / "report.json").read_text())["runs"]
    assert [r["name"] for r in runs] == list(report.NOTEBOOKS) and all(r["status"] == "ok" for r in runs), runs
    assert downloaded == set(hub_models("mini")), downloaded  # every miniature the profile names is used
    records = [json.loads(p.read_text()) for p in (results / "records").glob("*.json")]
    trained = [r for r in records if r["subject"].get("preset")]
    assert trained and {r["profile"] for r in records} == {"mini-rehearsal"}
    models = {r["subject"]["model"] for r in trained}
    assert models == {"google/bert_uncased_L-4_H-256_A-4", "google/bert_uncased_L-8_H-512_A-8"}, models
    page = (out / "index.html").read_text()
    assert "no masked-LM-pretrained RoBERTa miniature exists" in page  # RoBERTa rows: not run, with the reason

    offline = {**env, "HF_HUB_OFFLINE": "1"}  # the Hub is gone: DiffCSE's encoder and generator from the cache
    run = subprocess.run(["cse-kit", "train", "--preset", "diffcse-bert-sts", "--profile", "mini-rehearsal",
                          "--output-dir", str(tmp_path / "run"), "--no-progress"],
                         env={**offline, "CSE_KIT_DATA": str(data_dir)}, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    config = json.loads((tmp_path / "run" / "summary.json").read_text())["config"]
    assert (config["model"], config["generator"]) == hub_models("mini")[:2]


def _built(rows, profile="mini"):
    """Each row's run on the profile (or why it cannot run), as a notebook plans it."""
    from cse_kit.train.presets import ProfileUnavailable

    out = {}
    for row in rows:
        try:
            out[row.label] = row.subject(profile, 42)
        except ProfileUnavailable as err:
            out[row.label] = err.cause
    return out


def test_the_mini_profile_sizes_every_grid_within_its_runs_and_keeps_the_recipes():
    """The papers' recipes on the miniatures: what mini changes (corpus, dev interval, DiffAug's and PromptBERT's
    batch, what is counted in steps) fits its 187-step runs, every per-profile setting has a mini entry, and the
    rows that cannot run say why."""
    from cse_kit.experiments import Row
    from cse_kit.papers import comparison, diffaug, diffcse
    from cse_kit.train.presets import PROFILES, PRESETS, build_config

    for setting in (diffaug.STAGE1_GRIDS, diffaug.ALPHA_GRIDS, diffaug.COST_WINDOWS, diffaug.PREFIX_GRIDS,
                    comparison.SHARED_RECIPE, comparison.TRANSFER, comparison.SEEDS, diffcse.ABLATION_EVALS):
        assert set(PROFILES) <= set(setting)
    simcse, paper = build_config("simcse-bert", "mini"), build_config("simcse-bert", "paper")
    assert (simcse.lr, simcse.batch_size, simcse.temp, simcse.pooler, simcse.epochs) == \
        (paper.lr, paper.batch_size, paper.temp, paper.pooler, paper.epochs)
    steps = -(-11913 // simcse.batch_size)  # Wiki1M's first 11,913 sentences (the local sample), one epoch
    semi = build_config("diffaug-semi-bert", "mini")
    assert max(diffaug.STAGE1_GRIDS["mini"]) <= steps and semi.stage1_steps in diffaug.STAGE1_GRIDS["mini"]
    assert all(build_config(name, "mini").warmup_steps < steps // 5 for name in PRESETS if name.startswith("consert")
               and not name.endswith("-sts") and "roberta" not in name)
    fraction = _built(diffaug.fraction_rows("bert", 0.01, 1, "mini"))
    assert {cfg.nli_batch_size for cfg in fraction.values() if not isinstance(cfg, str) and cfg.method == "diffaug"} \
        == {diffaug.SMALL_FRACTION_BATCH["mini"]}  # 1% of the 5.9k triplets holds a batch
    generators = _built(diffcse.table6_rows(list(diffcse.GENERATOR_ROWS), "mini"))
    assert generators["BERT-tiny (L=2, H=128)"].generator == "google/bert_uncased_L-2_H-128_A-2"
    assert "miniature discriminator" in generators["BERT-large (L=24, H=1024)"]
    large = _built([Row("ESimCSE", "esimcse-bert-large"), Row("RoBERTa", "simcse-roberta")])
    assert large["ESimCSE"].model == "google/bert_uncased_L-8_H-512_A-8"
    assert "no masked-LM-pretrained RoBERTa miniature" in large["RoBERTa"]


def test_the_mini_reports_coverage_says_what_the_profile_can_show_with_its_evidence():
    """`cse-kit status` and the report say once what a mini number means, linking the section that says why."""
    from cse_kit.experiments import PROFILE_SCOPES
    from cse_kit.report import coverage_html, coverage_text
    from conftest import REPO

    scope, evidence = PROFILE_SCOPES["mini"]
    assert coverage_text([], "mini").endswith(f"{scope} ({evidence}).")
    assert f"href='{evidence}'" in coverage_html([], "mini") and scope not in coverage_text([], "smoke")
    path, anchor = evidence.split("#")
    headings = [line.lstrip("#").strip().lower() for line in (REPO / path).read_text().splitlines()
                if line.startswith("#")]
    slugs = {"".join(c for c in h if c.isalnum() or c in " -").replace(" ", "-") for h in headings}
    assert anchor in slugs, anchor
