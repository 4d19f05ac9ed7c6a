"""Power and GPU telemetry: sensors, the per-node sampler, clock offsets, the report."""
