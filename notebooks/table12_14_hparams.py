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
# # DiffCSE Tables 12-14: hyper-parameters and parameter counts
# Tables 12 and 13 are generated from the kit's presets, Table 14 from the models the profile instantiates
# (on the paper profile, BERT/RoBERTa-base built from their configurations, so nothing is downloaded).

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
from cse_kit.papers import diffcse

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)


# %%
hparams = pd.concat([ex.side_by_side(12, diffcse.hyperparameter_rows("sts"), tolerance=0).assign(table="12 (STS)"),
                     ex.side_by_side(13, diffcse.hyperparameter_rows("transfer"), tolerance=0)
                     .assign(table="13 (transfer)")])
hparams["row"] = hparams["table"] + ": " + hparams["row"]
hparams = hparams.drop(columns="table")
display(ex.show(hparams, "Tables 12-13: presets vs paper"))

# %%
counts = diffcse.parameter_table(s.profile)
millions = {m: {b: (v / 1e6 if isinstance(v, int) else float("nan")) for b, v in per.items()} for m, per in counts.items()}
table14 = ex.side_by_side(14, millions, tolerance=1.0, unit="M")  # M: millions of parameters, as the paper prints
table14["reason"] = [counts[r.row][r.column] if isinstance(counts[r.row][r.column], str) else ""
                     for r in table14.itertuples()]
display(ex.show(table14, f"Table 14: trainable parameters in millions (M) on the {s.profile} profile vs paper"))

# %%
ex.save_table(s, "table12_14_hparams", "Tables 12-14: hyper-parameters and parameter counts",
              pd.concat([hparams, table14.assign(row="14: " + table14["row"])]))
