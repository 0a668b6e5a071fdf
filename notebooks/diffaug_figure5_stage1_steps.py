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
# # DiffAug Figure 5: stage-1 length vs STS-B dev after stage 2, and the stage-1 loss
# Semi-supervised BERT-base without the auxiliary loss (the recipe whose Table 5 value, 2000 steps, the figure
# selects), trained with each stage-1 length, then the whole stage 2. Left axis: STS-B dev Spearman (×100) of the
# best checkpoint; right axis: the stage-1 cross-entropy at the end of stage 1 (mean of the last tenth of its
# logged steps). The paper gives no numbers, only the shape: best near 2,000 steps while the loss keeps falling.
# The paper does not list its grid: `stage1_steps` is ours. Every run snapshots its prefixes during stage 1, so the
# longest is also Figure 3's run (`diffaug_figure3_dynamics` reuses it).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # DiffAug recipe: paper | official-code
stage1_steps: list = []  # stage-1 lengths; empty: the profile's grid (paper: 500, 1000, ..., 4000)
snapshot_steps: int = 0  # stage-1 steps between prefix snapshots (Figure 3); 0: about 20 over the longest stage 1

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data.published import paper_figure
from cse_kit.papers import diffaug

ex.check_parameters()

diffaug.check_recipe(recipe, ["bert"])
s = ex.setup(profile, seeds, data_dir, results_dir, force)
grid = diffaug.stage1_grid(s.profile, stage1_steps)
every = snapshot_steps or diffaug.snapshot_every(grid)
stated = paper_figure(5, "diffaug")["stated"]


# %%
def columns(record):
    return {**ex.dev_columns(record), "stage-1 loss": diffaug.stage1_loss(record)}


# the stage-1 loss: an untrained model has none, so no untrained start
long = ex.run_rows(diffaug.figure5_rows(grid, every, recipe), s, ("sts_dev",), columns, starts=False)
comparison = ex.unpublished(long, ["STS-B", "stage-1 loss"])
display(ex.show(comparison, "DiffAug Figure 5: STS-B dev after stage 2 and the stage-1 loss, by stage-1 length"))
best = comparison[comparison.column == "STS-B"].sort_values("mean").iloc[-1]["row"]
print(f"best stage-1 length here: {best} steps (the paper: about {stated['best_stage1_steps']})")

# %%
means = comparison.pivot(index="row", columns="column", values="mean").loc[[str(k) for k in grid]]
figure = plots.two_axes(grid, {"STS-B dev": list(means["STS-B"])}, {"stage-1 loss": list(means["stage-1 loss"])},
                        "stage-1 steps", "DiffAug Figure 5: stage-1 length")

# %%
ex.save_table(s, "diffaug_figure5_stage1_steps", "DiffAug Figure 5: stage-1 steps vs STS-B dev and stage-1 loss",
              comparison, [figure], paper="diffaug",
              notes=[f"DiffAug recipe: {recipe}; stage-1 grid {grid} (ours: the paper lists none); best here: {best} "
                     f"steps, the paper's: about {stated['best_stage1_steps']}"])
