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
# # ESimCSE Table 3: STS test
# Spearman (×100) on STS12-16 (`all` aggregation), STS-B and SICK-R test, `cls_before_pooler` at test. Literature
# rows show the paper's numbers only; SimCSE rows are the released checkpoints the paper quotes (♣, paper profile);
# ESimCSE rows are our `esimcse-*` runs and, on the paper profile, the authors' released checkpoints. BERT-large,
# RoBERTa and RoBERTa-large run on the paper profile only (no offline checkpoint).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
backbones: list = ["bert", "bert-large", "roberta", "roberta-large"]  # encoders of the table
backbone: str = None  # run only this backbone, e.g. -p backbone bert; None runs all

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

chosen = ex.sweep(backbones, backbone, "backbone")
esimcse.check_backbones(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
columns = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
long = ex.run_rows(esimcse.table3_rows(chosen, s.profile), s, ("sts_test",), ex.sts_test_columns)
comparison = ex.compare(long, 3, columns, paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 3: STS test Spearman, paper vs reproduced"))

# %%
figure = plots.bars(comparison[comparison.n > 0], "Avg.", "ESimCSE Table 3: average STS test")

# %%
ex.save_table(s, "esimcse_table3_sts", "ESimCSE Table 3: STS test", comparison, [figure], paper="esimcse")
