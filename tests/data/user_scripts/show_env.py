"""Prints what each rank sees: its rank, its node and one variable (for rtk torchrun's tests)."""

import os

print(
    f"rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']}"
    f" node {os.environ.get('RTK_NODE')} mark {os.environ.get('RTK_TEST_MARK')}"
    f" run_dir {os.environ.get('RTK_RUN_DIR')} gloo {os.environ.get('GLOO_SOCKET_IFNAME')}",
    flush=True,
)
