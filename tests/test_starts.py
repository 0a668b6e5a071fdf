"""The untrained start beside every trained row (issue 56, item 2): on a profile whose backbone is not the papers'
(cpu, smoke) each trained row is shown beside its backbone evaluated as it is under the pooler the row's runs are
evaluated with, a record of the results store like any other, and each cell's change from it."""

import pandas as pd

from cse_kit import experiments as ex
from cse_kit.experiments.render import long_form_html, paper_layout_html
from cse_kit.papers import comparison as cmp
from cse_kit.report import comparison_frame, coverage_html, coverage_text
from cse_kit.results import Pretrained, ResultStore

#: two rows read by different poolers: [CLS] (SimCSE) and the template's [MASK] (PromptBERT); two steps each
ROWS = [ex.Row("SimCSE", "simcse-bert", {"max_steps": 2, "eval_steps": 2}),
        ex.Row("PromptBERT", "promptbert-bert", {"max_steps": 2, "eval_steps": 2})]


def _dev(record: dict) -> dict:
    return {"STS-B": record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]}


def test_each_trained_row_is_shown_beside_its_untrained_start_under_its_own_pooler(data_dir, tmp_path, counted):
    store = ResultStore(tmp_path, data_dir)
    long = ex.run_rows(ROWS, ex.Setup("smoke", [1], store), ("sts_dev",), _dev)
    starts = dict(zip(long.row, long.start))
    assert starts == {"SimCSE": "untrained smoke-bert (cls_before_pooler)",
                      "PromptBERT": "untrained smoke-bert (prompt_mask)"}
    # the start is the untrained model evaluated as `cse-kit eval --pooler P` would: a Pretrained record of the store
    for row, pooler in (("SimCSE", "cls_before_pooler"), ("PromptBERT", "prompt_mask")):
        record = store.get(Pretrained("smoke-bert", pooler, "smoke"), ("sts_dev",))
        assert set(long[long.row == row]["start: STS-B"]) == {_dev(record)["STS-B"]}
    assert counted.count("sts_dev") == 2 + 2  # 2 rows, one start per pooler; none again above

    comparison = ex.unpublished(long, ["STS-B"]).set_index("row")
    for row in ("SimCSE", "PromptBERT"):
        line = comparison.loc[row]
        assert line.start == starts[row] and line.from_start == line["mean"] - line.start_value

    # a second table of the same rows computes nothing again: the starts are cached like any record
    ex.run_rows(ROWS, ex.Setup("smoke", [1], store), ("sts_dev",), _dev)
    assert counted.count("sts_dev") == 4


def test_the_paper_profile_pretrained_rows_and_training_only_tables_have_no_start(data_dir, tmp_path):
    store = ResultStore(tmp_path, data_dir)
    assert ex.starting_point(ROWS[0], ex.Setup("paper", [42], store)) is None
    assert ex.starting_point(ex.Row("BERT", model="smoke-bert", pooler="avg"), ex.Setup("smoke", [1], store)) is None
    assert ex.starting_point(ex.Row("RoBERTa", "promptroberta-roberta"), ex.Setup("smoke", [1], store)) is None
    long = ex.run_rows(ROWS[:1], ex.Setup("smoke", [1], store), ("sts_dev",), _dev, starts=False)
    assert "start" not in long


def _comparison_with_start() -> pd.DataFrame:
    long = pd.DataFrame([{"row": "DiffAug", "seed": s, "status": "ok", "reason": "", "missing": "", "Avg.": v,
                          "start": "untrained all-MiniLM-L6-v2 (prompt_mask)", "start: Avg.": 39.03}
                         for s, v in ((42, 29.0), (43, 29.2))])
    return ex.unpublished(long, ["Avg."])


def test_the_table_shows_the_start_and_the_change_from_it_in_the_notebook_and_the_report():
    comparison = _comparison_with_start()
    line = comparison.iloc[0]
    assert line.start_value == 39.03 and round(line.from_start, 6) == -9.93
    shown = paper_layout_html(comparison)
    assert "start 39.03: -9.93" in shown and "starts: untrained all-MiniLM-L6-v2 (prompt_mask)" in shown
    # the report reads the saved table back from JSON
    saved = comparison_frame(comparison.to_dict("records"))
    assert "start 39.03: -9.93" in paper_layout_html(saved) and "-9.93" in long_form_html(saved)


def test_the_head_to_head_summary_gives_each_methods_start_and_its_change():
    long = pd.DataFrame([{"row": cmp.label(m, "paper recipe"), "seed": s, "status": "ok", "reason": "",
                          "Avg. STS": v + s, "start": f"untrained all-MiniLM-L6-v2 ({pooler})",
                          "start: Avg. STS": start}
                         for m, v, pooler, start in (("SimCSE", 74.0, "cls_before_pooler", 73.69),
                                                     ("DiffAug", 29.0, "prompt_mask", 39.03))
                         for s in (0, 1, 2)])
    scores = cmp.summary(long).set_index("method")
    assert scores.loc["SimCSE", "start"] == "untrained all-MiniLM-L6-v2 (cls_before_pooler)"
    assert scores.loc["SimCSE", "start Avg. STS"] == 73.69
    assert round(scores.loc["SimCSE", "Avg. STS − start"], 6) == 1.31
    assert round(scores.loc["DiffAug (uses NLI labels)", "Avg. STS − start"], 6) == -9.03


def test_the_cpu_coverage_says_what_the_profile_can_and_cannot_show_and_links_the_evidence():
    cpu = coverage_html([], "cpu")
    assert ex.CPU_PROFILE_SCOPE in cpu.replace("&#x27;", "'") and ex.CPU_PROFILE_EVIDENCE in cpu
    assert ex.CPU_PROFILE_SCOPE not in coverage_html([], "smoke")
    assert coverage_text([], "cpu").endswith(f"{ex.CPU_PROFILE_SCOPE} ({ex.CPU_PROFILE_EVIDENCE}).")  # cse-kit status
    assert ex.CPU_PROFILE_SCOPE not in coverage_text([], "smoke")


def test_the_report_keeps_the_notebooks_order_of_extra_tables_and_their_columns():
    from cse_kit.report import table_html

    scores = [{"method": "SimCSE", "Avg. STS mean": 74.85, "start": "untrained all-MiniLM-L6-v2 (cls_before_pooler)",
               "start Avg. STS": 73.69, "Avg. STS − start": 1.16}]
    extra = {"tables": {"scores": scores, "cost": [{"method": "SimCSE", "s/step": 0.59}]}}
    # the display message reaches the report with its keys sorted (nbformat): the layout saved beside them restores it
    arrived = {"tables": {caption: [dict(sorted(r.items())) for r in records]
                          for caption, records in sorted(extra["tables"].items())}}
    table = {"title": "t", "profile": "cpu", "profile_note": "", "seeds": [42], "comparison": [], "notes": [],
             "figures": [], "extra": arrived, "extra_layout": ex.extra_layout(extra)}
    shown = table_html(table, "t")
    assert shown.index(">scores<") < shown.index(">cost<")
    headers = [shown.index(f"<th>{c}</th>") for c in scores[0]]
    assert headers == sorted(headers)
