"""`cse-kit publish`: a trained run as a folder to share, and its upload to the Hub."""

from __future__ import annotations

import sys

from ..publish import PublishError, publish, push, push_command
from .common import command, results_dir_arg, check_results_dir


def add_publish(sub) -> None:
    p = command(sub, "publish", cmd_publish)
    p.add_argument("run", metavar="MODEL_OR_RUN",
                   help="a results store's record key (a notebook's table has one per run), its runs/<key> folder or "
                        "model, or a `cse-kit train` run folder")
    p.add_argument("--out", required=True, help="the folder to write (replaced whole)")
    results_dir_arg(p)
    p.add_argument("--repo-id", metavar="ORG/NAME", help="the Hub repository it goes to (named in the card)")
    p.add_argument("--push", action="store_true", help="upload the folder to --repo-id (created if missing) in one "
                                                       "commit; needs a token (`hf auth login` or HF_TOKEN)")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--license", help="the model's licence (a Hub licence id); default: the base model's")
    p.add_argument("--no-st", action="store_true",
                   help="keep the kit's export (loaded with cse-kit) even where a sentence-transformers model is "
                        "possible")


def cmd_publish(args) -> int:
    """The published folder of a run (cse_kit.publish), and with --push its upload to the Hub."""
    check_results_dir(args.results_dir)
    if args.push and not args.repo_id:
        raise PublishError("--push needs --repo-id ORG/NAME, the Hub repository to upload to")
    done = publish(args.run, args.out, results_dir=args.results_dir, repo_id=args.repo_id, license=args.license,
                   st=not args.no_st)
    print(f"wrote {done.folder}: a {done.kind} model, its card README.md"
          + (f", MTEB results in {done.mteb}" if done.mteb else ""))
    if args.push:
        try:
            url = push(done.folder, args.repo_id, private=args.private)
        except PublishError as err:
            print(f"cse-kit: not published: {err}", file=sys.stderr)
            return 2
        print(f"published {args.repo_id}{' (private)' if args.private else ''}: {url}")
    elif args.repo_id:
        print("push it: " + push_command(args.run, args.out, repo_id=args.repo_id, results_dir=args.results_dir,
                                         license=args.license, st=not args.no_st, private=args.private))
    return 0
