"""The notebooks' figures: sweep curves with the paper's points, Figure 2's similarity distributions, the
alignment-uniformity plane, and paper-vs-ours bars. Each returns a matplotlib Figure, drawn in the report's one
theme (THEME)."""

from __future__ import annotations

import base64
import functools
import io

import matplotlib.pyplot as plt
from matplotlib.text import Text
import numpy as np
import pandas as pd

PAPER_STYLE = {"color": "#555555", "marker": "s", "linestyle": "--", "label": "paper"}
OURS_STYLE = {"color": "#0b6fbf", "marker": "o", "capsize": 4, "label": "reproduced (mean ± std)"}
#: every figure's look: seaborn's white grid, as matplotlib ships it (importing seaborn for it would cost every
#: notebook's kernel scipy.stats, most of a CPU-second)
THEME = "seaborn-v0_8-whitegrid"


def themed(draw):
    """draw, its figure made under THEME (matplotlib's defaults for anything else a process draws stay as they are)."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with plt.style.context(THEME):
            return draw(*args, **kwargs)
    return drawn


@themed
def sweep(comparison: pd.DataFrame, xlabel: str, title: str, rotate_labels: bool = False):
    """One metric over a swept value: our mean ± std per value beside the paper's points. On one y-axis when both
    share a scale; when they cannot (a cpu/smoke profile far from the paper's numbers) two panels, each with its own
    axis and labelled as such, never two auto-scaled axes on one frame."""
    x = np.arange(len(comparison))
    ours = comparison["mean"].to_numpy(float)
    paper = comparison["paper"].to_numpy(float)
    # a figure whose paper prints no numbers (DiffAug Figure 4) has no paper points to keep apart from
    apart = np.isfinite(ours).any() and np.isfinite(paper).any() and abs(np.nanmean(ours) - np.nanmean(paper)) > 5
    fig, axes = plt.subplots(1, 2 if apart else 1, figsize=(10 if apart else 6, 3.6), squeeze=False)
    ours_ax, paper_ax = (axes[0][1], axes[0][0]) if apart else (axes[0][0], axes[0][0])
    paper_ax.plot(x, paper, **PAPER_STYLE)
    ours_ax.errorbar(x, ours, yerr=np.nan_to_num(comparison["std"].to_numpy(float)), **OURS_STYLE)
    column = comparison["column"].iloc[0]
    for ax in {ours_ax, paper_ax}:
        ax.set_xticks(x, comparison["row"], rotation=30 if rotate_labels else 0)
        ax.set_xlabel(xlabel)
        ax.legend(loc="best", fontsize=8)
    if apart:  # the same span of points on both panels, so a flat curve looks flat beside the paper's
        std = np.nan_to_num(comparison["std"].to_numpy(float))
        lows, highs = (np.nanmin(paper), np.nanmin(ours - std)), (np.nanmax(paper), np.nanmax(ours + std))
        span = 1.2 * max(highs[0] - lows[0], highs[1] - lows[1], 0.5)
        for ax, low, high in ((paper_ax, lows[0], highs[0]), (ours_ax, lows[1], highs[1])):
            centre = (low + high) / 2
            ax.set_ylim(centre - span / 2, centre + span / 2)
        paper_ax.set_ylabel(f"{column} (paper)")
        ours_ax.set_ylabel(f"{column} (reproduced, this profile)")
        paper_ax.set_title("paper")
        ours_ax.set_title("reproduced (other level, same span of points)")
        fig.suptitle(title)
    else:
        ours_ax.set_ylabel(column)
        ours_ax.set_title(title)
    fig.tight_layout()
    return fig


@themed
def series(comparison: pd.DataFrame, xlabel: str, title: str):
    """Several rows over the same swept columns (DiffAug Tables 2 and 7: methods over label fractions): one panel for
    the paper's lines and one for ours, side by side, each with its own axis (a cpu or smoke profile lies far from
    the paper's level), the same colour for a row in both."""
    fig, (paper_ax, ours_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    columns = list(dict.fromkeys(comparison["column"]))
    x = np.arange(len(columns))
    for i, (row, part) in enumerate(comparison.groupby("row", sort=False)):
        part = part.set_index("column").reindex(columns)
        colour = plt.cm.tab10(i % 10)
        paper_ax.plot(x, part["paper"].to_numpy(float), color=colour, marker="s", linestyle="--", label=row)
        ours_ax.errorbar(x, part["mean"].to_numpy(float), yerr=np.nan_to_num(part["std"].to_numpy(float)),
                         color=colour, marker="o", capsize=4, label=row)
    for ax, name in ((paper_ax, "paper"), (ours_ax, "reproduced (mean ± std)")):
        ax.set_xticks(x, columns)
        ax.set_xlabel(xlabel)
        ax.set_title(name)
    ours_ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@themed
def two_axes(x: list, left: dict[str, list], right: dict[str, list], xlabel: str, title: str, reference=None):
    """Two measures over the same x on twin y-axes, each labelled with its own name (DiffAug Figure 3: δ and κ; Figure
    5: STS-B dev and the stage-1 loss); `reference` (label, value) draws a horizontal line on the left axis."""
    fig, left_ax = plt.subplots(figsize=(6.5, 3.6))
    right_ax = left_ax.twinx()
    (left_name, left_values), = left.items()
    (right_name, right_values), = right.items()
    left_ax.plot(x, left_values, color="#0b6fbf", marker="o", label=left_name)
    right_ax.plot(x, right_values, color="#c0392b", marker="s", linestyle="--", label=right_name)
    if reference is not None:
        left_ax.axhline(reference[1], color="#555555", linestyle=":", label=reference[0])
    left_ax.set_xlabel(xlabel)
    left_ax.set_ylabel(left_name, color="#0b6fbf")
    right_ax.set_ylabel(right_name, color="#c0392b")
    handles = left_ax.get_legend_handles_labels()[0] + right_ax.get_legend_handles_labels()[0]
    left_ax.legend(handles=handles, fontsize=8, loc="best")
    left_ax.set_title(title)
    fig.tight_layout()
    return fig


@themed
def bars(comparison: pd.DataFrame, column: str, title: str):
    """Paper vs reproduced for one column of a table, one pair of bars per row that ran."""
    part = comparison[(comparison.column == column)]
    fig, ax = plt.subplots(figsize=(max(4, 1.3 * len(part)), 3.4))
    x = np.arange(len(part))
    ax.bar(x - 0.2, part["paper"], 0.4, color="#bbbbbb", label="paper")
    ax.bar(x + 0.2, part["mean"], 0.4, yerr=np.nan_to_num(part["std"].to_numpy(float)), color="#0b6fbf",
           capsize=4, label="reproduced")
    ax.set_xticks(x, part["row"], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(column)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over one
    fig.tight_layout()
    return fig


@themed
def gold_bins(bins_by_model: dict[str, dict], title: str = "Cosine similarity of STS-B test pairs by gold score"):
    """DiffCSE Figure 2: one panel per model, one density histogram per gold-score group (seaborn's histplot on bins
    shared by the groups, each group's density its own)."""
    import seaborn as sns

    fig, axes = plt.subplots(1, len(bins_by_model), figsize=(5 * len(bins_by_model), 3.6), sharex=True,
                             squeeze=False)
    for ax, (model, bins) in zip(axes[0], bins_by_model.items()):
        groups = {f"{name} (n={b['n']})": b["values"] for name, b in bins.items()}
        palette = dict(zip(groups, plt.cm.viridis(np.linspace(0, 0.9, len(groups)))))
        cosines = pd.DataFrame([(group, value) for group, values in groups.items() for value in values],
                               columns=["gold score", "cosine similarity"])
        if len(cosines):
            sns.histplot(cosines, x="cosine similarity", hue="gold score", bins=30, stat="density", common_norm=False,
                         alpha=0.45, palette=palette, legend=ax is axes[0][-1], ax=ax)
        ax.set_title(model)
        ax.set_xlabel("cosine similarity")
        ax.set_ylabel("")
        # plain tick labels: a collapsed smoke model's cosines all lie near 1, where matplotlib would print
        # offsets (1e-5 + 9.999e-1) under the axis
        ax.ticklabel_format(axis="x", useOffset=False, style="plain")
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
    axes[0][0].set_ylabel("density")
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "best", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


#: where a label may go around its point, in points: right, left, above, below, then the diagonals, then further out
_LABEL_SPOTS = [(dx * r, dy * r) for r in (8, 20, 34, 50)
                for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))]
#: points closer than this on the screen (pixels at 100 dpi) share one label, one name per line
_COINCIDENT_PX = 6.0


def _label_points(ax, ours: dict[str, tuple[float, float]], paper: dict[str, tuple[float, float]]) -> None:
    """Labels of (x, y) points that never overprint each other, a point or the axes' edge. Points that fall on one
    spot (a collapsed smoke model: several models at (0, 0)) share one label, a name per line; then each label takes
    the first spot around its point (right, left, above, below, diagonals, further out) whose box is inside the
    axes and clear of every label placed before and every point, with a leader line back to its point. Call it
    after the axes' limits and layout are final (it measures in display coordinates)."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()  # the limits, the layout and a renderer to measure text with
    renderer = fig.canvas.get_renderer() if hasattr(fig.canvas, "get_renderer") else fig._get_renderer()
    to_pixels = ax.transData.transform
    spots = []  # [display xy, data xy, names, colour]
    for names, colour in ((ours, OURS_STYLE["color"]), ({f"{k} (paper)": v for k, v in paper.items()},
                                                         PAPER_STYLE["color"])):
        for name, xy in names.items():
            at = to_pixels(xy)
            same = next((s for s in spots if s[3] == colour and np.hypot(*(s[0] - at)) < _COINCIDENT_PX), None)
            if same is None:
                spots.append([at, xy, [name], colour])
            else:
                same[2].append(name)
    pixels_per_point = fig.dpi / 72
    frame = ax.get_window_extent(renderer)
    marker = 6 * pixels_per_point  # a marker's half-width and a label's clearance
    taken = [Bbox.from_extents(x - marker, y - marker, x + marker, y + marker) for (x, y), *_ in spots]
    for at, xy, names, colour in spots:
        text = ax.annotate("\n".join(names), xy, fontsize=8, color=colour, textcoords="offset points",
                           xytext=(0, 0), arrowprops={"arrowstyle": "-", "color": "#bbbbbb", "lw": 0.6})
        best = None
        for dx, dy in _LABEL_SPOTS:
            text.set_position((dx, dy))
            text.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
            text.set_verticalalignment("bottom" if dy > 0 else "top" if dy < 0 else "center")
            text.update_positions(renderer)
            box = Text.get_window_extent(text, renderer)  # the words, not the leader line
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            clash = sum(box.overlaps(other) for other in taken)
            cost = clash + (0 if inside else 100)
            if best is None or cost < best[0]:
                best = (cost, dx, dy, box)
            if cost == 0:
                break
        _, dx, dy, box = best
        text.set_position((dx, dy))
        text.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
        text.set_verticalalignment("bottom" if dy > 0 else "top" if dy < 0 else "center")
        taken.append(box.expanded(1.0, 1.0).padded(2 * pixels_per_point))


def _alignment_axes(ax, title: str) -> None:
    ax.margins(0.25)
    ax.set_xlabel("uniformity (lower is better)")
    ax.set_ylabel("alignment (lower is better)")
    ax.set_title(title)


@themed
def align_uniform(points: dict[str, tuple[float, float]], paper: dict[str, tuple[float, float]] | None = None):
    """DiffCSE Table 11 as Wang & Isola's plane: alignment against uniformity, lower-left is better."""
    fig, ax = plt.subplots(figsize=(5, 4))
    paper = paper or {}
    for (a, u) in points.values():
        ax.scatter(u, a, color=OURS_STYLE["color"])
    for (a, u) in paper.values():
        ax.scatter(u, a, color=PAPER_STYLE["color"], marker="s")
    _alignment_axes(ax, "Alignment and uniformity, STS-B test")
    fig.tight_layout()
    _label_points(ax, {k: (u, a) for k, (a, u) in points.items()}, {k: (u, a) for k, (a, u) in paper.items()})
    return fig


def to_data_uri(fig) -> str:
    """A self-contained PNG data: URI (for the report; no file, no URL)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@themed
def align_uniform_sts(points: dict[str, tuple[float, float, float]], paper: dict[str, tuple[float, float]] | None = None,
                      title: str = "Alignment vs uniformity"):
    """SCD Figure 2: uniformity (x) against alignment (y), each model coloured by its average STS; the paper's
    points (alignment, uniformity) as squares."""
    fig, ax = plt.subplots(figsize=(6, 4))
    paper = paper or {}
    if points:
        a, u, sts = zip(*points.values())
        dots = ax.scatter(u, a, c=sts, cmap="coolwarm", s=60)
        fig.colorbar(dots, ax=ax, label="average STS (ours)")
    for (a, u) in paper.values():
        ax.scatter(u, a, color=PAPER_STYLE["color"], marker="s")
    _alignment_axes(ax, title)
    fig.tight_layout()
    _label_points(ax, {k: (u, a) for k, (a, u, _) in points.items()}, {k: (u, a) for k, (a, u) in paper.items()})
    return fig


@themed
def seed_strip(long: pd.DataFrame, column: str, title: str):
    """Every seed's score per row (one dot each, jittered sideways) with the row's mean as a bar: the spread that a
    paper's single number hides."""
    ok = long[long.status == "ok"]
    rows = list(dict.fromkeys(ok.row))
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(rows)), 3.8))
    rng = np.random.default_rng(0)
    for i, row in enumerate(rows):
        values = ok[ok.row == row][column].to_numpy(float)
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(values)), values, s=18, color="#0b6fbf", alpha=0.8, zorder=3)
        ax.hlines(values.mean(), i - 0.3, i + 0.3, color="#c0392b", linewidth=2, zorder=4)
    ax.set_xticks(range(len(rows)), rows, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(column)
    ax.set_title(title)
    fig.tight_layout()
    return fig


@themed
def pareto(points: dict[str, tuple[float, float]], front: list[str], xlabel: str, ylabel: str, title: str):
    """Score against cost, one point per method, the Pareto front (no method cheaper and better) joined and named
    in bold; labels below their point, in the point's order along x so that none stack."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, (x, y) in points.items():
        on_front = name in front
        ax.scatter(x, y, s=40, color="#c0392b" if on_front else "#0b6fbf", zorder=3)
    ordered = sorted(points, key=lambda n: points[n][0])
    for k, name in enumerate(ordered):
        x, y = points[name]
        ax.annotate(name, (x, y), xytext=(0, -12 - 10 * (k % 2)), textcoords="offset points", ha="center",
                    fontsize=8, fontweight="bold" if name in front else "normal")
    line = sorted((points[n] for n in front), key=lambda p: p[0])
    if len(line) > 1:
        ax.plot(*zip(*line), color="#c0392b", linestyle="--", linewidth=1, label="Pareto front")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.margins(0.15)
    fig.tight_layout()
    return fig


@themed
def best_so_far(curves: dict[str, list[float]], ylabel: str, title: str):
    """One step line per study: the best score after each trial (trial 1, 2, ...), each trial's point marked."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, values in curves.items():
        trials = np.arange(1, len(values) + 1)
        ax.step(trials, values, where="post", marker="o", markersize=4, label=name)
    ax.set_xlabel("trial")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
