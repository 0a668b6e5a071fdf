"""The report's coverage matrix: every table and figure of the four papers with its status, and `cse-kit status`."""

import json
import math

from cse_kit import cli, report
from cse_kit.experiments.render import not_run_reasons
from cse_kit.data.published import artefacts
from cse_kit.papers import PAPERS, all_notebooks, notebooks
from cse_kit.report.coverage_matrix import _status_of


def _table(lines, profile="cpu"):
    return {"name": "x", "profile": profile, "seeds": [42], "comparison": lines}


def _line(row, column, paper, mean, n, reason=""):
    return {"row": row, "column": column, "paper": paper, "mean": mean, "std": math.nan if n < 2 else 0.5, "n": n,
            "diff": mean - paper, "reason": reason}


def test_every_artefact_of_every_paper_is_listed_once_with_its_status():
    tables = {"table8_lambda": _table([_line("0.005", "STS-B", 84.56, 80.1, 2)]),
              "table1_sts": _table([_line("DiffCSE-BERT-base", "Avg.", 78.49, math.nan, 0, "needs the Hub")])}
    lines = report.coverage(tables, {"table7_mask_ratio": "ValueError: boom"})
    # the head-to-head and the equal tuning budget, after the papers, apart
    assert [(line["apart"], line["notebook"]) for line in lines[-2:]] == [(True, "compare_methods"),
                                                                          (True, "equal_budget")]
    lines = lines[:-2]
    assert [(line["key"], line["artefact"]) for line in lines] == [(k, a["id"]) for k in PAPERS for a in artefacts(k)]
    by = {(line["paper"], line["artefact"]): line for line in lines}
    assert len([line for line in lines if line["status"] != "schematic"]) == 42
    assert (by[("DiffCSE", "Table 8")]["kind"], by[("DiffCSE", "Table 8")]["status"]) == ("built", "built (cpu)")
    assert by[("DiffCSE", "Table 8")]["headline"] == "0.005, STS-B: paper 84.56 | ours 80.10 ± 0.50"
    assert by[("DiffCSE", "Table 1")]["status"] == "not run on this profile"
    assert by[("DiffCSE", "Table 1")]["detail"] == "1 row: needs the Hub"
    assert by[("DiffCSE", "Table 7")]["status"] == "failed"
    assert by[("DiffCSE", "Table 5")]["status"] == "not built"
    for key, paper in PAPERS.items():  # an artefact no notebook covers is named, never silently absent
        covered = {a for nb, k in all_notebooks().items() if k == key for a in notebooks(key)[nb]}
        for a in artefacts(key):
            if a["data"] and a["id"] not in covered:
                assert by[(paper, a["id"])]["status"] == "not implemented yet"
    schematic = {(line["paper"], line["artefact"]) for line in lines if line["status"] == "schematic"}
    assert schematic == {("DiffCSE", "Figure 1"), ("SCD", "Figure 1"), ("ESimCSE", "Figure 1"), ("DiffAug", "Figure 1"),
                         ("DiffAug", "Figure 2")}


def test_only_the_paper_profile_within_tolerance_is_reproduced():
    """smoke/cpu tables are built, never reproduced; on paper every cell within its metric's tolerance (1 point for
    scores, 0.02 alignment) is reproduced, else differs; a table some rows of which did not run is partial."""
    def status(lines, profile):
        [line] = [c for c in report.coverage({"table8_lambda": _table(lines, profile)}) if c["artefact"] == "Table 8"
                  and c["paper"] == "DiffCSE"]
        return line["kind"], line["status"], line["detail"]

    close = [_line("0.005", "STS-B", 84.56, 84.0, 3), _line("0.01", "STS-B", 84.0, 84.9, 3)]
    assert status(close, "smoke") == ("built", "built (smoke)", "")
    assert status(close, "paper") == ("reproduced", "reproduced", "")
    far = close + [_line("0.05", "STS-B", 83.0, 80.0, 3)]
    assert status(far, "paper") == ("differs", "differs (paper)", "1 cell(s) outside tolerance")
    some = close + [_line("0.1", "STS-B", 82.0, math.nan, 0, "needs the Hub")]
    assert status(some, "paper") == ("partial", "partial (2/3 rows, paper)", "not run: 1 row: needs the Hub")
    alignment = [{**_line("SimCSE", "Alignment", 0.24, 0.27, 3)}]
    assert status(alignment, "paper")[0] == "differs"  # 0.03 > Alignment's 0.02


def test_status_counts_per_paper_and_never_calls_smoke_reproduced():
    tables = {"table8_lambda": _table([_line("0.005", "STS-B", 84.56, 84.56, 2)], "smoke")}
    text = report.coverage_text(report.coverage(tables), "smoke")
    assert "DiffCSE 1/16 built on smoke; SCD 0/4 built on smoke; ESimCSE 0/11 built on smoke; DiffAug 0/11" in text
    assert "reproduced" not in text.splitlines()[-1]
    paper = report.coverage_text(report.coverage({"table8_lambda": _table([_line("0.005", "STS-B", 84.56, 84.0, 2)],
                                                                          "paper")}), "paper")
    assert "DiffCSE 1/16 built on paper, 1 reproduced" in paper


def test_status_prints_the_matrix_from_saved_tables_without_executing(tmp_path, capsys):
    (tmp_path / "tables").mkdir()
    saved = {**_table([_line("0.005", "STS-B", 84.56, 70.0, 1)], "smoke"), "name": "table8_lambda"}
    (tmp_path / "tables" / "table8_lambda.json").write_text(json.dumps(saved))
    other = {**_table([_line("0.005", "STS-B", 84.56, 70.0, 1)], "cpu"), "name": "table7_mask_ratio"}
    (tmp_path / "tables" / "table7_mask_ratio.json").write_text(json.dumps(other))
    assert cli.main(["status", "--profile", "smoke", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Table 8    built (smoke)" in out and "paper 84.56 | ours 70 (n=1)" in out
    assert "Table 7    not built" in out  # saved for another profile only
    assert "Figure 1   schematic" in out and "\nSCD\n" in out and "\nDiffAug\n" in out
    assert cli.main(["status", "--results-dir", str(tmp_path)]) == 0  # no --profile: every profile with tables
    out = capsys.readouterr().out
    assert out.index("profile cpu;") < out.index("profile smoke;") and "Table 7    built (cpu)" in out
    (tmp_path / "empty").mkdir()  # a store with nothing saved yet (a missing folder is refused: test_cli.py)
    assert cli.main(["status", "--results-dir", str(tmp_path / "empty")]) == 0
    assert "no saved tables in" in capsys.readouterr().out
    assert cli.main(["report", "--list", "--profile", "smoke", "--results-dir", str(tmp_path), "--paper", "scd"]) == 0
    assert "DiffCSE" not in capsys.readouterr().out


def test_every_headline_names_a_cell_of_the_papers_table_for_an_artefact_its_notebooks_reproduce():
    from cse_kit.data.published import paper_table
    from cse_kit.papers import paper_module

    for key in PAPERS:
        module = paper_module(key)
        reproduced = {a for artefacts_of in notebooks(key).values() for a in artefacts_of}
        for artefact, (row, column) in getattr(module, "HEADLINES", {}).items():
            assert artefact in reproduced, (key, artefact)
            number = artefact.removeprefix("Table ")
            table = paper_table(number, paper=key)
            row = row.removeprefix(f"{number}: ")  # a notebook of several tables prefixes its rows' labels
            # sweeps (Tables 7, 8) are printed transposed: the notebook's row is the paper's column
            assert {row, column} <= set(table.index) | set(table.columns), (key, artefact, row, column)


def test_the_page_names_the_machine_paths_a_notebook_printed(tmp_path):
    results, data = tmp_path / "store", tmp_path / "data"
    paths = report.machine_paths(results, data)
    text = (f"output {results}/runs/ab12; {report.ROOT}/cse_kit/results/:276: UserWarning: x; "
            f"missing from {data}: see https://example.org{data}/x, {data}2 and {report.ROOT}ly")
    assert report.without_machine_paths(text, paths) == (
        "output <results-dir>/runs/ab12; <cse-kit>/cse_kit/results/:276: UserWarning: x; "
        f"missing from <data-dir>: see https://example.org{data}/x, {data}2 and {report.ROOT}ly")
    inside = report.machine_paths(report.ROOT / "reports" / "results", data)  # the default store, inside the kit
    assert report.without_machine_paths(f"{report.ROOT}/reports/results/runs/a", inside) == "<results-dir>/runs/a"


def test_rows_a_profile_cannot_run_give_one_reason_per_cause_with_the_count_and_what_they_miss(tmp_path):
    """DiffCSE Table 6's generators and ESimCSE Table 3's released checkpoints on the smoke profile: the coverage
    matrix and the notes under the table once held one near-identical clause per model (six "generator ... has no
    offline checkpoint on the smoke profile", eight "needs the Hub: ...")."""
    from cse_kit import experiments as ex
    from cse_kit.papers import diffcse, esimcse
    from cse_kit.experiments.render import not_run_notes

    s = ex.setup("smoke", [1], results_dir=str(tmp_path))

    def not_run(rows, table, columns, paper):
        long = ex.run_rows([row for row in rows if row.unavailable], s, (), lambda record: {})
        return ex.compare(long, table, columns, paper=paper)

    table6 = not_run(diffcse.table6_rows(list(diffcse.GENERATOR_ROWS), "smoke"), 6, ["STS-B", "Avg. transfer"],
                     "diffcse")
    [generators] = not_run_reasons(table6.to_dict("records"))
    assert generators == ("6 rows (bert-large-uncased, bert-base-uncased, google/bert_uncased_L-8_H-512_A-8, "
                          "google/bert_uncased_L-4_H-512_A-8, google/bert_uncased_L-4_H-256_A-4, "
                          "google/bert_uncased_L-2_H-128_A-2): no offline checkpoint of the generator on the smoke "
                          "profile; run it with profile='paper'")
    assert not_run_notes(table6).count("notrun-reason") == 1

    table3 = not_run(esimcse.table3_rows(["bert", "bert-large", "roberta", "roberta-large"], "smoke"), 3,
                     ["STS-B", "Avg."], "esimcse")
    literature, released = not_run_reasons(table3.to_dict("records"))
    assert literature == "10 rows: literature rows: the paper's numbers only, no run behind them here"
    assert released.startswith("8 rows (princeton-nlp/unsup-simcse-bert-base-uncased, ffgcc/esimcse-bert-base-uncased, "
                               "princeton-nlp/unsup-simcse-bert-large-uncased, ")
    assert released.endswith("): released checkpoints need the Hub: they are evaluated on the paper profile")
    assert released.count("ffgcc/esimcse-roberta-large") == 1
    kind, status, detail = _status_of({"comparison": table3.to_dict("records"), "profile": "smoke"}, None)
    assert (kind, detail) == ("not run on this profile", f"{literature}; {released}")
