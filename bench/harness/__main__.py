"""`python -m harness` (with bench/ on PYTHONPATH; scripts/bench does that)."""

import sys

from harness.cli import main

sys.exit(main())
