"""rtk: Ray bring-up, preflight, training and power telemetry for your own GPU nodes."""

from __future__ import annotations

__version__ = "0.1.0"
