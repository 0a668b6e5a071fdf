"""`python -m cse_kit.cli`: the `cse-kit` command."""

import sys

from . import main

sys.exit(main())
