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
# # DiffAug Table 4: training cost of SimCSE, PromptBERT and DiffAug
# The paper's runs: supervised BERT-base on NLI, batch 128, 3 epochs, one Quadro RTX 8000 (36 / 48 / 65 minutes,
# 10 / 13 / 15 GB). The kit times a window of each run on the machine at hand (`window` main-stage steps; DiffAug's
# stage 1 capped to the window) and projects it to the full run: seconds per training step × (3 epochs of NLI's
# 275,601 triplets at the batch + DiffAug's 1,250 stage-1 steps), evaluation left out. Memory is the peak GPU memory
# on CUDA, the process's peak resident memory elsewhere. The absolute numbers depend on the machine; the ratios to
# SimCSE (the paper: 1 : 1.33 : 1.81 in time, 1 : 1.3 : 1.5 in memory) compare across machines.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
window: int = 0  # main-stage steps timed per run; 0: the profile's (cse_kit.papers.diffaug.COST_WINDOWS)

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffaug

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)
rows = diffaug.cost_rows(s.profile, window or None)

# %%
# training cost: an untrained model has none, so no untrained start
long = ex.run_rows(rows, s, ("sts_dev",), diffaug.cost_columns(s.profile), starts=False)
comparison = diffaug.cost_comparison(long)
display(ex.show(comparison, "DiffAug Table 4: projected training time (min) and peak memory (GB), and the ratios "
                            "to SimCSE"))

# %%
figure = plots.bars(comparison, "time ratio to SimCSE", "DiffAug Table 4: training time relative to SimCSE")

# %%
memory = ", ".join(sorted(set(long["memory measured"].dropna()))) if "memory measured" in long else "not measured"
ex.save_table(s, "diffaug_table4_cost", "DiffAug Table 4: training cost (time and memory)", comparison, [figure],
              paper="diffaug",
              notes=[f"timed over {rows[0].overrides['max_steps']} main-stage steps per run and projected to 3 epochs "
                     "of NLI (evaluation left out)", f"memory: {memory}"])
