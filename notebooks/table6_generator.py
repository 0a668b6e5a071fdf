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
# # DiffCSE Table 6: generator size
# STS-B dev Spearman and average transfer dev accuracy of DiffCSE-BERT-base with each frozen MLM generator.
# Off the paper profile only the profile's own generator runs (in the DistilBERT row, as the presets use it);
# the other rows are shown as not run, with the reason.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
generators: list = ["bert-large", "bert-base", "distilbert", "bert-medium", "bert-small", "bert-mini", "bert-tiny"]  # rows of the paper
generator: str = None  # run only this generator, e.g. -p generator bert-tiny; None runs the list

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(generators, generator, "generator")
diffcse.check_generators(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(diffcse.table6_rows(chosen, s.profile), s, ("sts_dev", "transfer_dev"), ex.dev_columns)
comparison = ex.compare(long, 6, ["STS-B", "Avg. transfer"])
display(ex.show(comparison, "Table 6: generator size (dev), paper vs reproduced"))

# %%
figure = plots.bars(comparison.dropna(subset=["mean"]), "STS-B", "Table 6: STS-B dev by generator")

# %%
notes = [] if s.profile == "paper" else [f"the DistilBERT row runs the {s.profile} profile's generator"]
ex.save_table(s, "table6_generator", "Table 6: generator size (dev)", comparison, [figure], notes)
