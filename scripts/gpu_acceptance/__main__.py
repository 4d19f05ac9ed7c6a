"""``python -m gpu_acceptance``: the acceptance run (see ``cli.py``)."""

from __future__ import annotations

import sys

from gpu_acceptance.cli import main

sys.exit(main(sys.argv[1:]))
