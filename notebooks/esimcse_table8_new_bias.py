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
# # ESimCSE Table 8: does repetition introduce a new bias?
# For random Wikipedia query sentences q, a candidate s1 whose token overlap with q lies in 13-17%, and s2 = s1 with
# the overlapping words repeated: the mean cos(q, s1) and cos(q, s2) (×100). If a model had learnt "repeated words =
# similar", Sim⟨q,s2⟩ would rise above Sim⟨q,s1⟩ (the paper: +0.68 SimCSE, +0.05 ESimCSE).
#
# The paper does not say how the candidates were recalled (§5.5). Our rule: queries in a seeded
# random order of the corpus the profile trains on (Wiki1M on `paper`, the local sample elsewhere); for each, draw
# `candidate_pool` sentences at random and take the first whose overlap lies in [overlap_low, overlap_high], where
# overlap = the share of the candidate's words (lower-cased, surrounding punctuation stripped) that occur in q; a
# query without one is skipped. s2 repeats each overlapping word in place ("looks," → "looks looks,").

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
queries: int = 100  # query sentences (the paper: 100)
overlap_low: float = 0.13  # lowest overlap of a candidate with its query (the paper: 13%)
overlap_high: float = 0.17  # highest overlap (the paper: 17%)
candidate_pool: int = 3000  # sentences drawn per query when looking for its candidate
query_seed: int = 0  # seed of the query order and the candidate draws

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data import load_corpus
from cse_kit.papers import esimcse

ex.check_parameters()

esimcse.check_new_bias(queries, overlap_low, overlap_high, candidate_pool)
ex.check(isinstance(query_seed, int), f"query_seed must be an integer, got {query_seed!r}")
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
corpus = esimcse.corpus_of(s.profile)
triples = esimcse.new_bias_triples(load_corpus(corpus, s.store.data_dir), queries, overlap_low, overlap_high,
                                   query_seed, candidate_pool)
ex.check(len(triples) > 0, f"no query of {corpus} has a candidate in [{overlap_low}, {overlap_high}]: widen the range")
q, s1, s2 = triples[0]
print(f"{len(triples)} queries from {corpus}, e.g.\n  q  = {q}\n  s1 = {s1}\n  s2 = {s2}")
long = esimcse.new_bias_long(esimcse.model_rows(s.profile), s, triples)
comparison = ex.compare(long, 8, ["Sim⟨q,s1⟩", "Sim⟨q,s2⟩"], paper="esimcse")
gains = esimcse.repetition_gains(comparison)
display(ex.show(comparison, "ESimCSE Table 8: similarity to the query before and after repetition"))
display(ex.show_values(gains, "Sim⟨q,s2⟩ − Sim⟨q,s1⟩: what repeating the overlapping words adds"))

# %%
figure = plots.bars(comparison[comparison.n > 0], "Sim⟨q,s2⟩", "ESimCSE Table 8: Sim⟨q,s2⟩")

# %%
ex.save_table(s, "esimcse_table8_new_bias", "ESimCSE Table 8: new bias", comparison, [figure], paper="esimcse",
              notes=[f"{len(triples)} queries from {corpus}, overlap in [{overlap_low}, {overlap_high}], "
                     f"{candidate_pool} candidates drawn per query, seed {query_seed}"],
              extra={"tables": {"Sim⟨q,s2⟩ − Sim⟨q,s1⟩": gains.to_dict("records")}})
