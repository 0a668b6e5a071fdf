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
# # DiffAug Table 6: the semi-supervised baselines, re-implemented
# STS test Spearman (×100), BERT-base. ConSERT, SimCSE and PromptBERT, each under the three strategies of the
# paper's Appendix C, one setting of the kit (`semi_strategy`) over each method's own preset: `joint` = L_cl on
# Wiki1M + α · L_ce on NLI (Eq. 13), `sup-unsup` = L_ce on NLI, then L_cl, `sup-joint` = L_ce, then L_joint. L_ce is
# DiffAug's stage-1 head on [u; v; |u − v|]. The paper tries several α per method and keeps the best; the kit
# trains every α of the grid and keeps the one with the best mean STS-B dev, shown below the table.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default (the paper: mean ± std over 3 runs)
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
alphas: list = []  # α grid of the joint strategies; empty: the profile's (cse_kit.papers.diffaug.ALPHA_GRIDS)
strategies: list = ["joint", "sup-unsup", "sup-joint"]  # the paper's three strategies
baselines: list = ["ConSERT", "SimCSE", "PromptBERT"]  # the methods the strategies apply to (the paper's three)

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data.published import average_mismatches
from cse_kit.papers import diffaug

ex.check_parameters()

diffaug.check_strategies(strategies)
diffaug.check_baselines(baselines)
s = ex.setup(profile, seeds, data_dir, results_dir, force)
grid = diffaug.alpha_grid(s.profile, alphas)
print(f"α grid of the joint strategies: {grid}")

# %%
columns = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
rows, groups = diffaug.table6_rows(grid, strategies, baselines)
long = ex.run_rows(rows, s, ("sts_dev", "sts_test"), diffaug.sts_and_dev_columns)
selected, chosen = ex.best_on_dev(long, groups, diffaug.DEV_COLUMN)
comparison = ex.compare(selected, 6, columns, paper="diffaug")
display(ex.show(comparison, "DiffAug Table 6: semi-supervised baselines, STS test Spearman, paper vs reproduced"))
alpha_table = diffaug.chosen_alphas(chosen)
display(ex.show_values(alpha_table, "α chosen on mean STS-B dev"))

# %%
figure = plots.bars(comparison, "Avg.", "DiffAug Table 6: average STS test by baseline and strategy")

# %%
ex.save_table(s, "diffaug_table6_semi_baselines", "DiffAug Table 6: semi-supervised baselines (BERT-base)",
              comparison, [figure], paper="diffaug",
              notes=[f"α grid {grid}; chosen on mean STS-B dev: "
                     + ", ".join(f"{row} {a}" for row, a in alpha_table["α chosen on STS-B dev"].items()),
                     *average_mismatches(6, "diffaug")],
              extra={"tables": {"α chosen on STS-B dev": alpha_table.reset_index().to_dict("records")}})
