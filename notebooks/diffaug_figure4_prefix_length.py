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

# %%

# %% [markdown]
# # DiffAug Figure 4: prefix length vs STS-B dev
# Semi-supervised BERT-base without the auxiliary loss (Table 3's setting), trained with each prefix length l (the
# positions of each of the two prefixes); STS-B dev Spearman (×100) of the best checkpoint. The paper plots the
# curve without listing its lengths and states the optimum is around l = 8: the grid is ours (`lengths`).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # DiffAug recipe: paper | official-code
lengths: list = []  # prefix lengths l; empty: the profile's grid (paper: 1, 2, 4, 8, 16, 32)

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data.published import paper_figure
from cse_kit.papers import diffaug

ex.check_parameters()

diffaug.check_recipe(recipe, ["bert"])
s = ex.setup(profile, seeds, data_dir, results_dir, force)
grid = diffaug.prefix_grid(s.profile, lengths)
stated = paper_figure(4, "diffaug")["stated"]

# %%
long = ex.run_rows(diffaug.figure4_rows(grid, recipe), s, ("sts_dev",), ex.dev_columns)
comparison = ex.unpublished(long, ["STS-B"])
display(ex.show(comparison, "DiffAug Figure 4: STS-B dev by prefix length"))
best = comparison.sort_values("mean").iloc[-1]["row"]
print(f"best prefix length here: {best} (the paper: around {stated['best_prefix_length']})")

# %%
figure = plots.sweep(comparison, "prefix length l", "DiffAug Figure 4: STS-B dev by prefix length")

# %%
ex.save_table(s, "diffaug_figure4_prefix_length", "DiffAug Figure 4: prefix length vs STS-B dev", comparison,
              [figure], paper="diffaug",
              notes=[f"DiffAug recipe: {recipe}; prefix lengths {grid} (ours: the paper lists none); best here: l = "
                     f"{best}, the paper's: around {stated['best_prefix_length']}"])
