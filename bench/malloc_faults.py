"""Page faults of reallocating large blocks, glibc's malloc as it comes against keep_freed_memory (what `cse-kit train`
sets on CPU). Each setting in a fresh process: cycles of six 24 MB tensors allocated, touched and freed, as a CPU
training step's activations; prints the minor page faults of every cycle.

  python bench/malloc_faults.py [--cycles 8]

Measured, not asserted: how soon the faults stop depends on the heap's layout (what else the process allocated in
between), so on how busy the machine is. tests/test_train.py asserts what does not: the freed blocks stay in the
process."""

import argparse
import json
import subprocess
import sys

CYCLES = """
import json, resource, sys, torch
from cse_kit.environment import keep_freed_memory

def faults_of_a_cycle():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(24 << 18) for _ in range(6)]
    del blocks
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

if sys.argv[1] == "keep":
    assert keep_freed_memory()
print(json.dumps([faults_of_a_cycle() for _ in range(int(sys.argv[2]))]))
"""


def faults(setting: str, cycles: int) -> list[int]:
    done = subprocess.run([sys.executable, "-c", CYCLES, setting, str(cycles)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=8)
    args = p.parse_args()
    for setting, name in (("default", "glibc default"), ("keep", "keep_freed_memory")):
        print(f"{name:18} page faults per cycle: {' '.join(f'{n:6d}' for n in faults(setting, args.cycles))}")


if __name__ == "__main__":
    main()
