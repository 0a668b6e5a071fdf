# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # SCD Figure 2: alignment vs uniformity
# Every BERT model the kit produces on the profile (untrained [CLS] and first-last average, SimCSE, DiffCSE, SCD),
# coloured by average STS test. Two ways of measuring (`geometry`): `wang-isola` (L2-normalised vectors,
# STS-B test pairs with gold > 4, uniformity over all test sentences; DiffCSE Table 11) and `sts-filter`, what
# SCD's official `SentEval/senteval/sts_filter.py` computes (raw vectors, pairs with gold >= 4, uniformity of
# difference rows; `cse_kit.eval.geometry.sts_filter_align_uniform`). The paper gives SCD's point only
# (alignment 0.84, uniformity -3.83); the official notebook's other points are SimCSE Figure 3's. Do not compare
# the two geometries' numbers with each other.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # SCD recipe: paper | official-code | released-checkpoints (the last two: BERT only)
geometry: str = "sts-filter"  # sts-filter (SCD's official code) | wang-isola (normalised, as DiffCSE Table 11)

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data.published import paper_spec
from cse_kit.papers import scd

ex.check_parameters()

scd.check_recipe(recipe, ["bert"])
scd.check_geometry(geometry)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(scd.figure2_rows(s.profile, recipe), s, (scd.GEOMETRIES[geometry], "sts_test"),
                   scd.figure2_columns(geometry))
ok = long[long.status == "ok"].groupby("row", sort=False)[["Alignment", "Uniformity", "STS"]].mean()
published = paper_spec("scd")["figures"]["2"]["points"]
comparison = ex.unpublished(long, ["Alignment", "Uniformity", "STS"])
if geometry == "sts-filter":  # the paper's point is measured as its official code does; not comparable otherwise
    comparison = ex.with_paper(comparison, {(row, column.capitalize()): value for row, point in published.items()
                                            for column, value in point.items()})
display(ex.show(comparison, f"SCD Figure 2 ({geometry}): alignment, uniformity, average STS test; the paper gives "
                            "SCD's point only"))

# %%
figure = plots.align_uniform_sts({k: tuple(v) for k, v in ok.iterrows()},
                                 {k: (v["alignment"], v["uniformity"]) for k, v in published.items()},
                                 f"SCD Figure 2 ({geometry})")

# %%
ex.save_table(s, "scd_figure2_alignment", "SCD Figure 2: alignment vs uniformity", comparison, [figure], paper="scd",
              notes=[f"geometry: {geometry}; SCD recipe: {recipe}"],
              extra={"points": {k: dict(v) for k, v in ok.iterrows()}, "paper": published})
