"""Preflight: prove the nodes are fit before a run (host, software, connectivity)."""
