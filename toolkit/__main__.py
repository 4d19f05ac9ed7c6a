"""Allow ``python -m toolkit``."""

from __future__ import annotations

from toolkit.cli import main

main()
