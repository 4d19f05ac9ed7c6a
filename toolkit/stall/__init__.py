"""The stall watchdog: stalled runs' records (``records``), ..."""
