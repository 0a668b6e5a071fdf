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
# # DiffAug Table 5: hyper-parameters
# Generated from the kit's presets, beside the paper's: the `paper` recipe (Table 5 itself), the official scripts'
# (`run_semi_sup_bert.sh`, `run_sup_bert.sh`: where they differ, the Δ says by how much), and what this profile
# runs (off `paper`, the profile's stand-in sizes). Nothing is trained.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists

# %%
import pandas as pd
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.papers import diffaug

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
versions = {"": diffaug.table5_rows("paper"), " (official code)": diffaug.table5_rows("official-code")}
if s.profile != "paper":
    versions[f" ({s.profile} profile)"] = diffaug.table5_rows("paper", s.profile)
ours = {row + suffix: values for suffix, rows in versions.items() for row, values in rows.items()}
paper_rows = {row + suffix: row for suffix, rows in versions.items() for row in rows}
comparison = ex.side_by_side(5, ours, paper_rows.get, paper="diffaug", tolerance=0)
display(ex.show(comparison, "DiffAug Table 5: the presets' hyper-parameters vs the paper's"))
print("official code: the supervised script accumulates 4 batches of 128 (four separate losses, 127 in-batch "
      "negatives each); the semi script runs 2 GPUs x 128 (+ 2 x 64 NLI), gathered: 256 (+ 128)")

# %%
ex.save_table(s, "diffaug_table5_hparams", "DiffAug Table 5: hyper-parameters", comparison, paper="diffaug",
              notes=["official code: run_sup_bert.sh accumulates gradients over 4 batches of 128 "
                     "(gradient_accumulation 4 in the -official preset: four separate losses, 127 in-batch negatives "
                     "each); run_semi_sup_bert.sh runs 1500 stage-1 steps with and without --use_aux_loss"])
