"""`cse-kit eval`: a model evaluated with the papers' SentEval protocol, or with MTEB."""

from __future__ import annotations

import argparse

from ..data import unverified_reads
from ..eval import Encoder, evaluate, format_tables, parse_tasks
from ..eval.encode import POOLERS, PROMPT_POOLERS
from ..io import write_json_atomic
from ..models import load_model, resolve_reference
from ..papers.released import lookup
from ..results import Pretrained, ResultStore
from ..train.export import ExportSettings
from .common import command, data_dir_arg


def add_eval(sub) -> None:
    p = command(sub, "eval", cmd_eval,
                 formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="poolers:\n" + "\n".join(f"  {k}: {v}" for k, v in POOLERS.items()))
    p.add_argument("--model", required=True, help="short name, Hub id or local directory")
    p.add_argument("--pooler", choices=list(POOLERS),
                   help="how a sentence vector is read off the model (recorded with every result); default: the "
                        "pooler in a kit-trained model's cse_kit.json")
    p.add_argument("--template", help="the prompt poolers' template, *sent0* for the sentence and *mask* for the mask "
                                      "token; default: the model's cse_kit.json, else PromptBERT's "
                                      "'This sentence of \"*sent0*\" means*mask*.'")
    p.add_argument("--benchmark", default="senteval", choices=["senteval", "mteb"],
                   help="senteval (default): the papers' protocol, the kit's own implementation; mteb: MTEB tasks "
                        "through the mteb package (pip install -e '.[mteb]'), results into the results store")
    p.add_argument("--tasks", help="SentEval: sts, transfer, all, or comma-separated names (default sts). MTEB: "
                                   "comma-separated task or benchmark names; default: a CPU selection of 12 English "
                                   "tasks (cse_kit.eval.mteb_eval.CPU_TASKS); 'MTEB(eng, v2)': the full English "
                                   "benchmark")
    p.add_argument("--mode", default="test", choices=["dev", "test", "fasttest"],
                   help="test: paper numbers (transfer kfold 10, adam); fasttest: test numbers with the fast "
                        "transfer config (kfold 5, rmsprop); dev: dev numbers, fast config")
    p.add_argument("--output", help="write the result JSON here (MTEB: mteb's full result of every task)")
    p.add_argument("--results-dir", help="MTEB: the results store (default: $CSE_KIT_RESULTS or reports/results)")
    p.add_argument("--force", action="store_true", help="MTEB: evaluate again the tasks the results store has")
    p.add_argument("--seed", type=int, default=1111, help="transfer classifier seed (SentEval's default 1111)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="batches of this many (padded) tokens instead of --batch-size sentences (default: 16384 on "
                        "CUDA, none on CPU)")
    p.add_argument("--max-length", type=int, default=None,
                   help="truncate to this many tokens (default: the model's cse_kit.json, else none)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--amp", action="store_true", help="encode under bf16/fp16 autocast on a GPU, or bf16 on a CPU "
                   "with a bf16 unit (AMX, AVX512-BF16; elsewhere fp32): faster, not the papers' fp32 protocol; "
                   "recorded in the result")
    data_dir_arg(p)


def cmd_eval(args) -> int:
    if args.benchmark == "mteb":
        from ..eval.mteb_eval import resolve_tasks  # mteb, an optional extra, is imported only to be used

        tasks = resolve_tasks(args.tasks)
    else:
        tasks = parse_tasks(args.tasks or "sts")  # fail on a typo before loading anything
    resolve_reference(args.model, args.data_dir)  # a path that does not exist is said to be one
    stated = ExportSettings(args.model)
    pooler = args.pooler or pooler_of(args.model, stated)
    tokenizer, model = load_model(args.model, data_dir=args.data_dir)
    reading = args.template or stated.prompt
    if reading and not args.template and pooler in PROMPT_POOLERS:
        print(f"prompt reading {reading.describe()} (from {args.model}/cse_kit.json)")
    max_length = args.max_length or stated.max_length
    if max_length and not args.max_length:
        print(f"sentences cut at {max_length} tokens (from {args.model}/cse_kit.json; --max-length to change)")
    encoder = Encoder(model, tokenizer, pooler, batch_size=args.batch_size, max_tokens=args.max_tokens,
                      max_length=max_length, device=args.device, amp=args.amp, template=reading)
    if args.amp:
        print(encoder.amp_line())
    if args.benchmark == "mteb":
        return _eval_mteb(args, encoder, tasks)
    result = evaluate(encoder, tasks, args.mode, args.data_dir, args.seed, model_name=args.model)
    print(format_tables(result))
    if args.output:

        unverified = unverified_reads()  # read under CSE_KIT_ALLOW_UNVERIFIED_DATA: said with the result
        said = {**result, **({"unverified_data": unverified} if unverified else {})}
        print(f"wrote {write_json_atomic(args.output, said)}")
    return 0


def _eval_mteb(args, encoder, tasks) -> int:
    """MTEB through the mteb package, into the results store: a model this store trained adds to its run's record,
    any other to the record of (model, pooler)."""
    from ..eval.mteb_eval import format_table, version  # mteb, an optional extra

    store = ResultStore(args.results_dir, args.data_dir)
    target = store.run_of_model(args.model) or Pretrained(args.model, encoder.pooler)
    record, reused = store.get_mteb(target, tasks, encoder=encoder, force=args.force)
    results = {task.metadata.name: record["metrics"]["mteb"][task.metadata.name] for task in tasks}
    print(f"model {args.model}  pooler {encoder.pooler}  MTEB {version()} (main scores x100; mteb's own evaluation)")
    print(format_table(results))
    if reused:
        print(f"reused from the results store: {', '.join(reused)} (--force evaluates them again)")
    print(f"results store: record {record['key']} in {store.root}")
    if args.output:
        full = {"benchmark": "mteb", "mteb_version": version(), "model": args.model, "pooler": encoder.pooler,
                "record": record["key"], "tasks": results}
        print(f"wrote {write_json_atomic(args.output, full)}")
    return 0


def pooler_of(model: str, stated=None) -> str:
    """The pooler a kit-trained model was exported with (stated: its ExportSettings), or the one a released
    checkpoint of the papers must be evaluated with (cse_kit/papers/released.json); other models must say it."""
    stated = stated or ExportSettings(model)
    if stated.pooler:
        print(f"pooler {stated.pooler} (from {model}/cse_kit.json)")
        return stated.pooler
    entry = lookup(model)
    if entry:
        print(f"pooler {entry['pooler']} (released checkpoint of {entry['paper']}; source: {entry['source']})")
        return entry["pooler"]
    raise ValueError(f"--pooler is required for {model} (it has no cse_kit.json saying how it was trained and is not "
                     "a released checkpoint of the papers)")
