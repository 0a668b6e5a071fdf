"""Does bf16 training move any method's numbers beyond its seed spread? (issue 45, item 2)

  python bench/precision_fidelity.py [--profile cpu] [--seeds 42,43,44] [--methods SimCSE,DiffCSE,...]
                                     [--recipes "paper recipe"] [--results-dir R] [--markdown FILE]

The head-to-head's runs (cse_kit.papers.comparison: every method, its paper recipe, its seeds) trained twice, once
with mixed_precision=no (fp32) and once with mixed_precision=bf16 (autocast), the seeds matched. For each method it
prints the average STS test (7 tasks, the papers' protocol, fp32 evaluation) in both precisions as mean ± std over
the seeds, the mean of the per-seed differences bf16 - fp32, and the seed spread it is judged against: the larger of
the two precisions' standard deviations. A difference within the spread is noise; one beyond it is a finding.

Runs go through the results store like a notebook's (--results-dir, default the kit's), so a second call reuses them
and an interrupted one resumes where it stopped. --markdown writes the table (for docs/training.md).
"""

import argparse
import statistics
import sys
import time

from cse_kit import experiments as ex
from cse_kit.environment import cpu_bf16_unit
from cse_kit.papers import comparison as cmp

PRECISIONS = {"fp32": "no", "bf16": "bf16"}


def precision_rows(profile: str, methods: list[str], recipes: list[str]) -> list[ex.Row]:
    """The head-to-head's rows, each once per precision (its label names it)."""
    return [ex.Row(f"{row.label} [{name}]", row.preset, {**row.overrides, "mixed_precision": setting})
            for row in cmp.rows(profile, methods, recipes) for name, setting in PRECISIONS.items()]


def averages(found: dict[str, list[dict]], gold) -> dict[str, dict[int, float]]:
    """label -> {seed: average STS test} from the records' test-pair similarities."""
    return {label: {r["config"]["seed"]: cmp.sts_columns(r, gold)["Avg. STS"] for r in records}
            for label, records in found.items()}


def table(rows: list[ex.Row], scores: dict[str, dict[int, float]]) -> list[dict]:
    """One line per method: each precision's (mean, std) over its seeds, the per-seed differences bf16 - fp32 over
    the seeds both have, their mean, and the spread it is judged against (the larger std)."""
    lines = []
    for fp32_row, bf16_row in zip(rows[::2], rows[1::2]):
        a, b = scores[fp32_row.label], scores[bf16_row.label]
        fp32, bf16 = ((statistics.mean(x.values()), statistics.stdev(x.values())) for x in (a, b))
        per_seed = [b[s] - a[s] for s in sorted(set(a) & set(b))]
        delta, spread = statistics.mean(per_seed), max(fp32[1], bf16[1])
        lines.append({"run": fp32_row.label.removesuffix(" [fp32]"), "seeds": len(per_seed), "fp32": fp32,
                      "bf16": bf16, "delta": delta, "per_seed": per_seed, "spread": spread,
                      "within": abs(delta) <= spread})
    return lines


def markdown(lines: list[dict]) -> str:
    out = ["| run | seeds | fp32 avg STS | bf16 avg STS | mean Δ (bf16 − fp32) | per-seed Δ | seed spread (std) "
           "| within spread |", "|---|---|---|---|---|---|---|---|"]
    for x in lines:
        per_seed = ", ".join(f"{d:+.3f}" for d in x["per_seed"])
        out.append(f"| {x['run']} | {x['seeds']} | {x['fp32'][0]:.3f} ± {x['fp32'][1]:.3f} | {x['bf16'][0]:.3f} ± "
                   f"{x['bf16'][1]:.3f} | {x['delta']:+.3f} | {per_seed} | {x['spread']:.3f} | "
                   f"{'yes' if x['within'] else '**no**'} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu", choices=("cpu", "smoke", "paper"))
    parser.add_argument("--seeds", default="")
    parser.add_argument("--methods", default=",".join(cmp.METHODS))
    parser.add_argument("--recipes", default="paper recipe")
    parser.add_argument("--results-dir", default="")
    parser.add_argument("--markdown", default="")
    args = parser.parse_args()
    if args.profile != "paper" and not cpu_bf16_unit():
        sys.exit("this CPU has no bf16 unit (AMX-BF16 or AVX512-BF16): bf16 would be emulated, so its numbers and "
                 "times would say nothing of the CPUs the kit trains in bf16 on; run this on such a CPU or a GPU")
    seeds = [int(s) for s in args.seeds.split(",") if s] or cmp.SEEDS[args.profile]
    methods, recipes = args.methods.split(","), args.recipes.split(",")
    cmp.check_methods(methods, recipes)
    s = ex.setup(args.profile, seeds, results_dir=args.results_dir)
    rows = precision_rows(s.profile, methods, recipes)
    start = time.perf_counter()
    found = ex.records(rows, s, cmp.evaluations(None))
    lines = table(rows, averages(found, cmp.gold(s.store.data_dir)))
    text = markdown(lines)
    print(f"\nbf16 unit: {cpu_bf16_unit()}; profile {s.profile}; seeds {seeds}; "
          f"{time.perf_counter() - start:.0f} s (finished runs are reused)\n\n{text}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
