"""The AdamW step on a CPU, three ways, at BERT-base's parameter shapes (issue 45, item 4).

  python bench/adamw_step.py [--steps 5] [--shape bert-base|minilm]

torch.optim.AdamW over the 110 M fp32 weights of a BERT-base encoder (transformers' BertConfig(), no pooler; --shape
minilm: all-MiniLM-L6-v2's 22 M) with fixed random gradients, stepped as torch's default per-parameter loop
(foreach=False), as one _foreach kernel per operation (what the kit's fp32 runs use on a CPU) and fused (one kernel
over every parameter: the kit's bf16 runs on a CPU, and CUDA). The three are stepped in alternating rounds, so machine
noise hits all alike; it prints each one's median seconds a step and its ratio to the loop, and how far each ends
from the loop after the same steps (foreach: bit-identical; fused: its own rounding).
"""

import argparse
import statistics
import time

import torch

WAYS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def encoder_parameters(shape: str) -> list[torch.Tensor]:
    from transformers import BertConfig, BertModel

    config = BertConfig() if shape == "bert-base" else BertConfig(hidden_size=384, num_hidden_layers=6,
                                                                  num_attention_heads=12, intermediate_size=1536)
    torch.manual_seed(0)
    return [p.detach() for p in BertModel(config, add_pooling_layer=False).parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per way, after one untimed")
    parser.add_argument("--shape", choices=("bert-base", "minilm"), default="bert-base")
    args = parser.parse_args()
    weights = encoder_parameters(args.shape)
    grads = [torch.randn_like(w) * 1e-3 for w in weights]
    copies = {}
    for way, kwargs in WAYS.items():
        params = [w.clone().requires_grad_() for w in weights]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        copies[way] = (params, torch.optim.AdamW(params, lr=3e-5, weight_decay=0.0, **kwargs))
    seconds = {way: [] for way in WAYS}
    for step in range(args.steps + 1):
        for way, (_, opt) in copies.items():
            start = time.perf_counter()
            opt.step()
            if step:
                seconds[way].append(time.perf_counter() - start)
    loop = statistics.median(seconds["loop"])
    count = sum(w.numel() for w in weights) / 1e6
    print(f"AdamW step over {args.shape}'s {count:.1f} M fp32 weights, {torch.get_num_threads()} threads, medians of "
          f"{args.steps} steps after one, the ways alternating")
    print(f"{'way':8} {'s/step':>8} {'vs loop':>8} {'max |w - loop w| after ' + str(args.steps + 1) + ' steps':>34}")
    for way, (params, _) in copies.items():
        median = statistics.median(seconds[way])
        apart = max(float((p - q).abs().max()) for p, q in zip(params, copies["loop"][0]))
        print(f"{way:8} {median:8.3f} {loop / median:7.2f}x {apart:34.3g}")


if __name__ == "__main__":
    with torch.no_grad():
        main()
