"""How comparisons are shown: numbers by their kind, Δ coloured by the metric's tolerance, the paper's layout."""

import math

import pandas as pd
import pytest

from cse_kit.experiments import render


@pytest.mark.parametrize("value,shown", [(7e-6, "7e-06"), (0.005, "0.005"), (0.0001, "0.0001"), (64, "64"),
                                         (2.0, "2"), (84.56, "84.56"), (-1.468, "-1.47"), (0.097, "0.097"),
                                         (-0.313, "-0.313"), (0, "0"), (-0.0, "0"), (math.nan, "—")])
def test_numbers_are_formatted_by_their_kind(value, shown):
    assert render.fmt_number(value) == shown


def test_a_tiny_mean_is_shown_in_scientific_notation_and_its_delta_with_four_decimals():
    assert render.fmt_ours(5.8e-6, 1e-8, 2) == "5.80e-06 ± 1.0e-08"
    assert render.fmt_diff(5.8e-6 - 0.097, 5.8e-6) == "-0.0970"
    assert render.fmt_ours(0.0963, 0.0011, 3) == "0.0963 ± 0.0011"
    assert render.fmt_ours(1.99e-4, math.nan, 1) == "1.99e-04 (n=1)"  # one seed: as the others' means, not 0.000199


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
    # a setting is shown as the paper prints it, not as a measurement: no "(n=1)", "same" / "differs", no Δ
    assert "(n=1)" not in html and "<b>7e-06</b>" in html and ">same<" in html and ">differs<" in html
    assert "+0.0" not in html


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
    from cse_kit.experiments import plots

    return plots.sweep(pd.DataFrame({"row": ["0", "0.005", "0.1"], "column": "STS-B", "paper": [82.22, 84.56, 83.66],
                                     "mean": mean, "std": [0.01, 0.02, math.nan]}), "λ", "Table 8")


def test_a_sweep_on_the_papers_scale_shares_one_axis():
    assert len(_sweep([82.0, 84.0, 83.9]).axes) == 1


def test_a_sweep_on_another_scale_gets_two_panels_of_the_same_span():
    """A curve flat within 0.05 points must not look like the paper's 2.3-point curve."""
    paper_ax, ours_ax = _sweep([40.10, 40.12, 40.15]).axes
    assert paper_ax.get_ylim()[1] - paper_ax.get_ylim()[0] == pytest.approx(ours_ax.get_ylim()[1] - ours_ax.get_ylim()[0])
    assert ours_ax.get_ylim()[1] - ours_ax.get_ylim()[0] > 2.3


def _label_boxes(fig):
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    return ax, [Text.get_window_extent(t, renderer) for t in ax.texts], ax.get_window_extent(renderer)  # the words


def _assert_apart_and_inside(ax, boxes, inside):
    for i, box in enumerate(boxes):
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, ax.texts[i].get_text()  # not under a colour bar
        assert inside.y0 <= box.y0 and box.y1 <= inside.y1, ax.texts[i].get_text()
        assert not any(box.overlaps(other) for other in boxes[i + 1:]), ax.texts[i].get_text()


@pytest.mark.parametrize("figure", ["table11", "scd_figure2"])
def test_scatter_labels_of_coincident_points_neither_overprint_nor_leave_the_figure(figure):
    """A collapsed smoke profile puts several models on one spot, at the right edge: they share one label, a name
    per line, instead of four labels fanned around one point (SCD Figure 2) or two at (0, 0) (DiffCSE Table 11)."""
    from cse_kit.experiments import plots

    same = (0.0002, -0.0004)
    names = ["BERT-base [CLS]", "SimCSE-BERT-base", "DiffCSE-BERT-base", "SCD-BERT-base"]
    if figure == "table11":
        fig = plots.align_uniform({n: same for n in names}, {"DiffCSE-BERT-base": (0.097, -1.44)})
    else:
        fig = plots.align_uniform_sts({**{n: (*same, 33.0 + i) for i, n in enumerate(names)},
                                       "BERT-base (first-last avg)": (0.54, -0.85, 36.7)},
                                      {"SCD-BERT-base": (0.84, -3.83)})
    ax, boxes, inside = _label_boxes(fig)
    labels = [t.get_text() for t in ax.texts]
    assert "\n".join(names) in labels and len(labels) == (2 if figure == "table11" else 3)
    _assert_apart_and_inside(ax, boxes, inside)


def test_scatter_labels_of_nearby_points_take_free_spots():
    """The paper profile's Table 11: each of our points beside the paper's, six labels in a small area."""
    from cse_kit.experiments import plots

    paper = {"Avg. BERT-base": (0.172, -1.47), "SimCSE-BERT-base": (0.177, -2.31), "DiffCSE-BERT-base": (0.097, -1.44)}
    ours = {"Avg. BERT-base": (0.17, -1.45), "SimCSE-BERT-base": (0.18, -2.3), "DiffCSE-BERT-base": (0.1, -1.42)}
    ax, boxes, inside = _label_boxes(plots.align_uniform(ours, paper))
    assert len(boxes) == 6
    _assert_apart_and_inside(ax, boxes, inside)


def test_figure2_ticks_are_plain_numbers_without_an_offset():
    """A collapsed smoke model's cosines all lie in [0.99997, 1]: no `1e−5+9.999e−1` under the axis."""
    import numpy as np

    from cse_kit.experiments import plots

    values = list(np.linspace(0.99997, 0.99999, 50))
    fig = plots.gold_bins({m: {"0-1": {"values": values, "n": 50}, "4-5": {"values": values, "n": 50}}
                           for m in ("SimCSE", "DiffCSE")})
    fig.canvas.draw()
    for ax in fig.axes:
        assert ax.xaxis.get_offset_text().get_text() == ""
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert len(set(ticks)) == len(ticks) > 1 and all(t.startswith("0.9999") for t in ticks), ticks


def test_a_values_table_shows_enough_digits_to_tell_its_numbers_apart_and_its_key_first():
    """DiffCSE Figure 2's mean cosine per gold group on smoke: every mean rounds to 1.0 at three decimals."""
    means = pd.DataFrame({"SimCSE-BERT-base": [0.999981, 0.999984, 0.999990],
                          "DiffCSE-BERT-base": [0.999982, 0.999986, 0.999991]},
                         index=pd.Index(["0-1", "1-2", "4-5"], name="gold score"))
    html = render.values_html(means, "mean cosine", together=True)
    assert html.index("<th>gold score</th>") < html.index("<th>SimCSE-BERT-base</th>")
    assert ">0.999981<" in html and ">0.999990<" in html and ">1.0<" not in html
    assert "<caption>mean cosine</caption>" in html
    # numbers of their usual size keep their usual digits; whole numbers stay whole; tiny ones are scientific
    frame = pd.DataFrame({"model": ["a", "b"], "score": [84.561, 76.2], "n": [3, 12], "tiny": [5.75e-6, 5.81e-6]})
    shown = render.values_html(frame)
    assert ">84.56<" in shown and ">12<" in shown and ">5.750e-06<" in shown and ">a<" in shown
    gains = render.values_html(pd.DataFrame({"paper": [0.68, 0.05], "ours": [-0.0, 0.004]}))  # ESimCSE Table 8
    assert ">0.68<" in gains and ">0.05<" in gains and ">0.0040<" in gains and "-0" not in gains


def test_settings_and_counts_show_as_values_in_the_notebook_and_in_the_report_alike():
    """Tables 12-14: side_by_side's lines are values, not measurements: no "(n=1)" and, held exactly, "same" or
    "differs" rather than Δ, also once saved and read back by the report (the tolerance travels with the lines);
    Table 14's counts carry their unit (millions of parameters: 110M beside our 1.01M)."""
    import json

    from cse_kit import experiments as ex, report

    hparams = ex.side_by_side(12, {"BERT-base": {"batch size": 64, "λ": 0.01}}, tolerance=0)
    hparams = hparams.assign(row="12 (STS): " + hparams["row"])
    counts = ex.side_by_side(14, {"SimCSE": {"BERT-base": 1.01, "RoBERTa-base": 124.9}}, tolerance=1.0, unit="M")
    both = pd.concat([hparams, counts.assign(row="14: " + counts["row"])])
    saved = report.comparison_frame(json.loads(both.to_json(orient="records")))
    for shown in (render.paper_layout_html(both, "Tables 12-14"), render.paper_layout_html(saved, "Tables 12-14")):
        assert shown.count("<table") == 2 and shown.count("<caption>") == 1
        first, second = shown.split("</table>")[:2]
        assert "batch size" in first and "<th>BERT-base</th>" not in first and "14: SimCSE" in second
        assert "(n=1)" not in shown and "<b>64</b>" in first and ">same<" in first and ">differs<" in first
        assert "+0.00" not in first  # no Δ for a setting
        assert ">110M<" in second and "<b>1.01M</b>" in second
        assert "BERT-base, RoBERTa-base: within 1" in shown and "scores (Spearman" not in shown
    long = render.long_form_html(saved)
    assert "(n=1)" not in long and ">same<" in long and ">1.01M<" in long


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
