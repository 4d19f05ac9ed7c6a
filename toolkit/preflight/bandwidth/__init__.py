"""Bandwidth preflight: TCP per pair and all-reduce, measured as a Ray job, and localised."""
