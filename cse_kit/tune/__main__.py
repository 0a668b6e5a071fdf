"""A worker process of a study (cse_kit.tune.workers.local_workers starts it)."""

import sys

from .workers import worker_main

sys.exit(worker_main(sys.argv[1:]))
