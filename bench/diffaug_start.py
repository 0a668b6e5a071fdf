"""Where DiffAug's test vector starts on a model, and what its prefix costs there (issue 56, item 1)

  python bench/diffaug_start.py [--model all-MiniLM-L6-v2] [--prefix-len 8] [--test [KEYS]] [--run RUN_DIR]

DiffAug tests the [MASK] state of PromptBERT's template (`prompt_mask`) read through an encoder that attends the
whole prefix table (2l positions at every layer), the real tokens' positions shifted by 2l, as the official code's
`past_key_values` shift them (transformers 4.15). This prints the STS-B dev Spearman (with --test also the 7-STS test
average, the papers' protocol) of the untrained model under each reading, then under each part of that test model
apart: the position shift alone, a zero prefix alone (attention to 2l keys of logit 0 and values 0), both, and
DiffAug's freshly initialised prefix (the official init: N(0, 0.02) through the prefix MLP, a table of about 0.003).
--run adds a trained run's stage-1 prefix on the untrained encoder, the run's exported model, and its trained encoder
without the prefix (what stage 2 did to the encoder's own reading).
"""

import argparse
import time

import numpy as np
import torch
from torch import nn

from cse_kit.data import load_sts
from cse_kit.eval.encode import Encoder
from cse_kit.eval.sts import SPLIT_TASKS, STS_YEARS, correlations, pair_scores, test_pairs, test_similarities
from cse_kit.methods.diffaug import DiffAug
from cse_kit.models import load_model
from cse_kit.models.prefix import PrefixedEncoder


class FromZero(nn.Module):
    """A prefixed encoder whose real tokens keep positions 0, 1, ... (the prefix's attention without the shift)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    @property
    def config(self):
        return self.model.config

    def forward(self, input_ids, attention_mask=None, **kwargs):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand(len(input_ids), -1)
        return self.model(input_ids, attention_mask, position_ids=positions, **kwargs)


class Shifted(FromZero):
    """An encoder whose real tokens' positions start at `shift` (the prefix's shift without its attention)."""

    def __init__(self, model: nn.Module, shift: int):
        super().__init__(model)
        self.shift = shift

    def forward(self, input_ids, attention_mask=None, **kwargs):
        positions = torch.arange(self.shift, self.shift + input_ids.shape[1], device=input_ids.device)
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=positions.expand(len(input_ids), -1), **kwargs)


def scores(model, tokenizer, pooler: str, test: bool, data_dir=None) -> dict[str, float]:
    """STS-B dev Spearman, and the 7-STS test average with `test`."""
    encoder = Encoder(model, tokenizer, pooler, progress=False)
    out = {"STS-B dev": correlations(*pair_scores(encoder, load_sts("STSBenchmark", "dev", data_dir)))["spearman"]}
    if test:
        sims = test_similarities(encoder, data_dir)
        out["7-STS test"] = float(np.mean([correlations(np.array(sims[t]), np.array(
            [p.score for p in test_pairs(t, data_dir)]))["spearman"] for t in STS_YEARS + SPLIT_TASKS]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--prefix-len", type=int, default=8, help="l, each prefix's length (the presets' 8)")
    parser.add_argument("--seed", type=int, default=42, help="the fresh prefix's initialisation seed")
    parser.add_argument("--test", nargs="?", const="all", default="",
                        help="also the 7-STS test average (minutes a line on a CPU): of every line, or of the lines "
                             "whose keys are given, comma-separated (e.g. fresh,run)")
    parser.add_argument("--run", help="a trained DiffAug run folder (its stage1.safetensors and model/)")
    parser.add_argument("--data-dir", help="data directory (default: $CSE_KIT_DATA, else data/)")
    args = parser.parse_args()

    tokenizer, encoder = load_model(args.model)
    encoder.eval()
    torch.manual_seed(args.seed)
    with torch.no_grad():
        fresh = DiffAug(encoder, tokenizer, prefix_len=args.prefix_len).prefix_encoder()
    zero = torch.zeros_like(fresh)
    table = 2 * args.prefix_len
    lines = [(pooler, f"{args.model}, no prefix", encoder, pooler)
             for pooler in ("avg", "cls_before_pooler", "prompt_mask", "prompt_mask_denoised")]
    lines += [("shift", f"positions shifted by 2l = {table}, no prefix", Shifted(encoder, table), "prompt_mask"),
              ("zero", f"zero prefix of {table} positions, positions not shifted",
               FromZero(PrefixedEncoder(encoder, zero)), "prompt_mask"),
              ("zero+shift", "zero prefix, positions shifted (both)", PrefixedEncoder(encoder, zero), "prompt_mask"),
              ("fresh", f"DiffAug's fresh prefix (mean |value| {fresh.abs().mean():.4f}): its test model at step 0",
               PrefixedEncoder(encoder, fresh), "prompt_mask")]
    if args.run:
        from safetensors.torch import load_file

        stage1 = load_file(f"{args.run}/stage1.safetensors")["prefix"]
        trained = load_model(f"{args.run}/model")[1]
        lines += [("stage1", f"the run's stage-1 prefix (mean |value| {stage1.abs().mean():.4f}) on the untrained "
                   "encoder", PrefixedEncoder(encoder, stage1), "prompt_mask"),
                  ("run", "the run's exported model (stage 2 done)", trained, "prompt_mask"),
                  ("run-encoder", "the run's trained encoder without its prefix", trained.encoder, "prompt_mask")]
    tested = {key for key, *_ in lines} if args.test == "all" else set(args.test.split(",")) if args.test else set()
    print("| line | model | pooler | STS-B dev | 7-STS test | seconds |\n|---|---|---|---|---|---|")
    for key, what, model, pooler in lines:
        start = time.perf_counter()
        numbers = scores(model, tokenizer, pooler, key in tested, args.data_dir)
        print(f"| {key} | {what} | {pooler} | {numbers['STS-B dev']:.2f} | "
              f"{numbers.get('7-STS test', float('nan')):.2f} | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
