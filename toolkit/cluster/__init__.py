"""Cluster lifecycle: plan, bring-up, status, teardown, containers and node logs."""
