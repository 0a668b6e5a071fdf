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
# # DiffAug Figure 3: representation divergence δ and weight convergence κ over stage 1
# (a) δ (Eq. 6): the mean squared distance between a sentence's two prefix views, f(x; θ1) and f(x; θ2), with SimCSE's
# dropout views as the reference line; (b) κ (Eqs. 7-8): the mean row norm of each layer's keys and values minus that
# of its prefix keys and values, averaged over layers. Measured on every stage-1 snapshot of the longest run of
# Figure 5 (semi-supervised BERT-base, no auxiliary loss; stage 1 at lr 1e-3, batch 128 on `paper`). What the paper
# leaves open, our choices (cse_kit/eval/prefix_dynamics.py): f is the L2-normalised [MASK] state of the template
# without denoising or MLP, the encoder in eval mode; the inputs are STS-B dev sentences (`sentences` of them); κ's
# K_m are the keys of the templated sentence's real tokens through its own prefix, averaged over both prefixes.
# The paper gives only the shape: δ peaks near 1,500 steps then slowly falls; κ falls monotonically.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # DiffAug recipe: paper | official-code
stage1_steps: int = 0  # length of stage 1; 0: the longest of the profile's Figure 5 grid (its run is reused)
snapshot_steps: int = 0  # stage-1 steps between snapshots; 0: as Figure 5 (about 20 over the longest stage 1)
sentences: int = 1000  # STS-B dev sentences δ and κ are measured on

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data.published import paper_figure
from cse_kit.papers import diffaug

ex.check_parameters()

diffaug.check_recipe(recipe, ["bert"])
s = ex.setup(profile, seeds, data_dir, results_dir, force)
grid = diffaug.stage1_grid(s.profile, [])
length = stage1_steps or max(grid)
diffaug.check_stage1_steps([length])
every = snapshot_steps or diffaug.snapshot_every(grid)
inputs = diffaug.dynamics_sentences(s.store.data_dir, sentences)
stated = paper_figure(3, "diffaug")["stated"]

# %%
found = ex.records(diffaug.figure5_rows([length], every, recipe), s, ("sts_dev",))
curves = {record["seed"]: diffaug.stage1_curves(record, s.store, inputs) for record in found[str(length)]}
comparison = ex.unpublished(diffaug.figure3_long(curves), ["δ", "κ"])
display(ex.show(comparison, f"DiffAug Figure 3: δ and κ over {length} stage-1 steps (mean ± std over seeds)"))
steps = [p["step"] for p in next(iter(curves.values()))["points"]]
delta = comparison[(comparison.column == "δ") & (comparison.row != diffaug.DROPOUT_ROW)].set_index("row")["mean"]
kappa = comparison[comparison.column == "κ"].set_index("row")["mean"]
reference = float(comparison[(comparison.row == diffaug.DROPOUT_ROW) & (comparison.column == "δ")]["mean"].iloc[0])
peak = int(delta.idxmax())
print(f"δ peaks at stage-1 step {peak} here (the paper: about {stated['delta_peak_step']}); dropout's δ: {reference:.4f}")

# %%
figure = plots.two_axes(steps, {"δ (representation divergence)": [delta[str(k)] for k in steps]},
                        {"κ (weight convergence)": [kappa[str(k)] for k in steps]}, "stage-1 steps",
                        "DiffAug Figure 3: δ and κ over stage 1", reference=("δ of dropout (SimCSE)", reference))

# %%
ex.save_table(s, "diffaug_figure3_dynamics", "DiffAug Figure 3: δ and κ over stage-1 steps", comparison, [figure],
              paper="diffaug", notes=[f"DiffAug recipe: {recipe}; {len(inputs)} STS-B dev sentences; snapshots every "
                                      f"{every} of {length} stage-1 steps; δ peaks at {peak} here, the paper's about "
                                      f"{stated['delta_peak_step']}"])
