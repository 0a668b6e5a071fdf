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
# # DiffCSE Table 3: what the objective is made of
# STS-B dev Spearman and average transfer dev accuracy (BERT-base, the `diffcse-bert-sts` settings) of SimCSE, DiffCSE
# and its ablations: without the contrastive loss (λ·L_RTD only), the discriminator working on the next sentence of
# the corpus (or on both), a conditional MLM instead of replaced-token detection (same / next / same+next sentence)
# and a conditional corrective LM (COCO-LM's copy mechanism). The next-sentence rows train on an ordered corpus
# (`paper`: WikiText-103; `cpu`, `smoke`: the Licenses-ordered texts), the others on the profile's corpus. SimCSE
# and DiffCSE are the same runs as in Tables 1, 5 and 15. Off the `paper` profile only STS-B dev is evaluated.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
variants: list = ["DiffCSE", "DiffCSE w/o contrastive loss", "DiffCSE use next sent. for x′",
                  "DiffCSE use same+next sent. for x′", "Conditional MLM — for same sent.",
                  "Conditional MLM — for next sent.", "Conditional MLM — for same+next sent.",
                  "Conditional Corrective LM"]  # the paper's rows after SimCSE
variant: str = ""  # run only this row besides SimCSE, e.g. papermill -p variant "Conditional Corrective LM"

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(variants, variant or None, "variant")
diffcse.check_choices(chosen, diffcse.TABLE3_VARIANTS, "Table 3 variant(s)")
s = ex.setup(profile, seeds, data_dir, results_dir, force)
evals = diffcse.ABLATION_EVALS[s.profile]

# %%
long = ex.run_rows(diffcse.table3_rows(chosen), s, evals, ex.dev_columns)
comparison = ex.compare(long, 3, ["STS-B", "Avg. transfer"])
display(ex.show(comparison, "Table 3: the objective's ablations (dev), paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "Table 3: STS-B dev")

# %%
notes = [] if "transfer_dev" in evals else [f"Avg. transfer dev accuracy is evaluated on the paper profile only "
                                            f"(the {s.profile} profile: STS-B dev, see ABLATION_EVALS)."]
ex.save_table(s, "table3_objective", "Table 3: ablations of the objective (dev)", comparison, [figure], notes)
