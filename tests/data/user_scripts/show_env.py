"""Prints what each rank sees: its rank, its node and one variable (for rtk torchrun's tests).

--then-sleep S: sleep S seconds after printing (a run to stop with Ctrl-C).
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--then-sleep", type=float, default=0.0)
args = parser.parse_args()
# One write for the whole line: print() writes the text and its newline apart, and two
# local ranks sharing the node's stdout then glue their lines together (seen in a test run).
sys.stdout.write(
    f"rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']}"
    f" node {os.environ.get('RTK_NODE')} mark {os.environ.get('RTK_TEST_MARK')}"
    f" run_dir {os.environ.get('RTK_RUN_DIR')} gloo {os.environ.get('GLOO_SOCKET_IFNAME')}\n"
)
sys.stdout.flush()
time.sleep(args.then_sleep)
