"""How comparisons are shown: numbers by their kind, Δ coloured by the metric's tolerance, the paper's layout."""

import math

import pandas as pd
import pytest

from cse_kit import render


@pytest.mark.parametrize("value,shown", [(7e-6, "7e-06"), (0.005, "0.005"), (0.0001, "0.0001"), (64, "64"),
                                         (2.0, "2"), (84.56, "84.56"), (-1.468, "-1.47"), (0.097, "0.097"),
                                         (-0.313, "-0.313"), (0, "0"), (math.nan, "—")])
def test_numbers_are_formatted_by_their_kind(value, shown):
    assert render.fmt_number(value) == shown


def test_a_tiny_mean_is_shown_in_scientific_notation_and_its_delta_with_four_decimals():
    assert render.fmt_ours(5.8e-6, 1e-8, 2) == "5.80e-06 ± 1.0e-08"
    assert render.fmt_diff(5.8e-6 - 0.097, 5.8e-6) == "-0.0970"
    assert render.fmt_ours(0.0963, 0.0011, 3) == "0.0963 ± 0.0011"


def _line(column, paper, mean, n=2, std=0.1, **extra):
    return {"row": "r", "column": column, "paper": paper, "mean": mean, "std": std, "n": n, "diff": mean - paper,
            "reason": "", **extra}


def test_alignment_is_judged_on_its_own_scale_and_the_caption_says_so():
    """DiffCSE Table 11: ours 0.03 against the paper's 0.17 is far off, though within one 'point'."""
    html = render.paper_layout_html(pd.DataFrame([_line("Alignment", 0.17, 0.03), _line("STS", 76.16, 75.5)]))
    assert f"style='color:{render.RED}'>-0.140" in html and f"style='color:{render.GREEN}'>-0.66" in html
    assert "Alignment: within 0.02" in html and "scores (Spearman ×100, accuracy %): within 1" in html


def test_an_exact_tolerance_colours_any_difference_red():
    frame = pd.DataFrame([_line("learning rate", 7e-6, 7e-6, n=1, tolerance=0.0),
                          _line("λ", 0.005, 0.01, n=1, tolerance=0.0)])
    html = render.paper_layout_html(frame)
    assert "7e-06" in html and "0.005" in html and "learning rate, λ: exact" in html
    assert html.count(render.RED) == 1
    # a setting is shown as the paper prints it, not as a measurement: no "(n=1)", "same" rather than "+0.0000"
    assert "(n=1)" not in html and "<b>7e-06</b>" in html and ">same<" in html and ">+0.0050<" in html


def test_paper_layout_keeps_the_papers_rows_and_columns_and_marks_rows_not_run():
    frame = pd.DataFrame([
        {**_line("STS12", 70.0, 71.0), "row": "SimCSE"}, {**_line("Avg.", 76.0, 75.0), "row": "SimCSE"},
        {"row": "RoBERTa", "column": "STS12", "paper": 68.6, "mean": math.nan, "std": math.nan, "n": 0,
         "diff": math.nan, "reason": "no RoBERTa offline"}])
    html = render.paper_layout_html(frame, "Table 1")
    assert html.index(">STS12<") < html.index(">Avg.<") and html.index(">SimCSE<") < html.index(">RoBERTa<")
    assert "title='no RoBERTa offline'>not run" in html
    assert "<b>71.00 ± 0.10</b>" in html and "<caption>Table 1" in html


def _sweep(mean):
    import matplotlib

    matplotlib.use("Agg")
    from cse_kit import plots

    return plots.sweep(pd.DataFrame({"row": ["0", "0.005", "0.1"], "column": "STS-B", "paper": [82.22, 84.56, 83.66],
                                     "mean": mean, "std": [0.01, 0.02, math.nan]}), "λ", "Table 8")


def test_a_sweep_on_the_papers_scale_shares_one_axis():
    assert len(_sweep([82.0, 84.0, 83.9]).axes) == 1


def test_a_sweep_on_another_scale_gets_two_panels_of_the_same_span():
    """A curve flat within 0.05 points must not look like the paper's 2.3-point curve."""
    paper_ax, ours_ax = _sweep([40.10, 40.12, 40.15]).axes
    assert paper_ax.get_ylim()[1] - paper_ax.get_ylim()[0] == pytest.approx(ours_ax.get_ylim()[1] - ours_ax.get_ylim()[0])
    assert ours_ax.get_ylim()[1] - ours_ax.get_ylim()[0] > 2.3


@pytest.mark.parametrize("figure", ["table11", "scd_figure2"])
def test_scatter_labels_of_coincident_points_neither_overprint_nor_leave_the_figure(figure):
    from cse_kit import plots

    same = (0.0002, -0.0004)  # a collapsed smoke profile: several models on one spot, at the right edge
    names = ["BERT-base [CLS]", "SimCSE-BERT-base", "DiffCSE-BERT-base", "SCD-BERT-base"]
    if figure == "table11":
        fig = plots.align_uniform({n: same for n in names}, {"DiffCSE-BERT-base": (0.097, -1.44)})
    else:
        fig = plots.align_uniform_sts({n: (*same, 33.0 + i) for i, n in enumerate(names)},
                                      {"SCD-BERT-base": (0.84, -3.83)})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    from matplotlib.text import Text

    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the words, not the leader line
    assert len(boxes) == len(names) + 1
    inside = ax.get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, ax.texts[i].get_text()  # not under a colour bar
        assert not any(box.overlaps(other) for other in boxes[i + 1:]), ax.texts[i].get_text()


def test_rows_with_other_columns_get_their_own_table_and_settings_show_as_integers():
    lines = [_line("batch size", 64, 64.0, n=1, std=math.nan), _line("λ", 0.005, 0.005, n=1, std=math.nan)]
    lines = [{**x, "row": "12 (STS): BERT-base"} for x in lines]
    lines.append({**_line("BERT-base", 220, 110.0), "row": "14: DiffCSE (train)"})
    page = render.paper_layout_html(pd.DataFrame(lines), "Tables 12-14")
    assert page.count("<table") == 2 and page.count("<caption>") == 1
    first, second = page.split("</table>")[:2]
    assert "batch size" in first and "<th>BERT-base</th>" not in first and "14: DiffCSE (train)" in second
    assert "<b>64 (n=1)</b>" in first and "<b>0.005 (n=1)</b>" in first


def test_a_saved_figure_without_paper_numbers_renders_in_the_report():
    """compare()'s NaN is null in the saved JSON; a figure with no paper numbers (DiffAug Figures 3, 5) has only
    nulls in `paper` and `diff`, which pandas keeps as None: the report made numbers of them again."""
    import json

    from cse_kit import report

    saved = json.loads(json.dumps([{"row": "8", "column": "STS-B", "paper": None, "mean": 7.5, "std": None, "n": 1,
                                    "diff": None, "reason": ""}]))
    html = report.table_html({"title": "DiffAug Figure 5", "profile": "smoke", "profile_note": "", "seeds": [1],
                              "comparison": saved, "notes": [], "figures": []}, "figure5")
    assert "<b>7.50 (n=1)</b>" in html and "—" in html
