"""Per-node load preflight: GEMM, copies and intra-node all-reduce, as a Ray job, graded."""
