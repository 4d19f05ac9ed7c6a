"""The stall watchdog: when no rank finishes a step, find out where each one is."""
