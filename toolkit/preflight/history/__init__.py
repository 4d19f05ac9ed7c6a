"""Node error history: kernel-log XIDs, DCGM diagnostics and RDMA ports, parsed and graded."""
