"""Prints what each rank sees: its rank, its node and one variable (for rtk torchrun's tests).

--then-sleep S: sleep S seconds after printing (a run to stop with Ctrl-C).
"""

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--then-sleep", type=float, default=0.0)
args = parser.parse_args()
print(
    f"rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']}"
    f" node {os.environ.get('RTK_NODE')} mark {os.environ.get('RTK_TEST_MARK')}"
    f" run_dir {os.environ.get('RTK_RUN_DIR')} gloo {os.environ.get('GLOO_SOCKET_IFNAME')}",
    flush=True,
)
time.sleep(args.then_sleep)
