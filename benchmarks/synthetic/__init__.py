"""The pieces of benchmarks/synthetic_run.py: spec and plan, samples, records."""
