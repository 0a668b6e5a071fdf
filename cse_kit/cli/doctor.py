"""`cse-kit doctor`: this machine's numbers against the kit's references."""

from __future__ import annotations

import sys

from .. import doctor
from ..doctor import QUICK_TRANSFER, REFERENCES, WRITE_COMMAND
from .common import command, data_dir_arg


def add_doctor(sub) -> None:
    p = command(sub, "doctor", cmd_doctor)
    p.add_argument("--quick", action="store_true",
                   help="check the README's main command on its STS tasks and one transfer task, "
                        f"{QUICK_TRANSFER}, instead of all seven (the other six encode 100k sentences): under 3 "
                        "minutes on 2 cores")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"],
                   help="slurm: measure in a SLURM job, on the nodes that will train ($CSE_KIT_EXECUTOR_PARAMS, "
                        "e.g. '{\"slurm_partition\": \"gpu\"}')")
    p.add_argument("--write-references", action="store_true",
                   help="after an intended change: rewrite the numbers that moved or had no reference, keep those "
                        "still the same, and record the code's digest where every check was measured (without "
                        f"--quick: {WRITE_COMMAND})")
    p.add_argument("--references", default=REFERENCES, metavar="FILE",
                   help="compare with (or write) this file instead of the kit's (a lab's own references)")
    data_dir_arg(p)


def cmd_doctor(args) -> int:
    try:
        return doctor.run(args.quick, args.data_dir, args.cluster, args.write_references, args.references)
    except doctor.JobFailed as error:
        print(f"cse-kit: error: {error}", file=sys.stderr)
        return 2
