"""What Ray's TLS costs in object transfers between nodes: ray.tls on against off.

On a 2-node namespace sandbox (created here, removed at the end), each round brings
the cluster up with ``rtk up`` (``ray.tls`` off, then on: alternated), and a driver on
the head pulls objects a task made on the other node (``ray.get`` moves them through
the object managers' gRPC, which TLS encrypts), then ``rtk down``. Printed: MB/s per
mode (median of the pulls of every round) and the ratio with TLS over without.

Needs root (the sandbox). Run by hand:
    python benchmarks/tls_transfer.py [--rounds 3] [--size-mb 256] [--pulls 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.ray_resources import host_resource
from toolkit.sandbox import create
from toolkit.shell import with_env_file
from toolkit.transport.ssh import SshTransport

DRIVER = """
import json, os, time
import numpy as np
import ray

SIZE = int(os.environ["SIZE_BYTES"])
PULLS = int(os.environ["PULLS"])
ray.init(address=os.environ["RTK_HEAD_ADDRESS"], logging_level="ERROR", log_to_driver=False)


@ray.remote(num_cpus=0, resources={os.environ["WORKER_RESOURCE"]: 0.001})
def make(i):
    return np.full(SIZE, i % 251, dtype=np.uint8)


seconds = []
for i in range(PULLS):
    ref = make.remote(i)
    ray.wait([ref], fetch_local=False)  # made on the worker, not yet here
    began = time.perf_counter()
    data = ray.get(ref)
    seconds.append(time.perf_counter() - began)
    assert data.nbytes == SIZE and int(data[0]) == i % 251
    del data, ref
print(json.dumps(seconds))
"""


def rtk(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"rtk {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def pulls(inventory: Path, size_bytes: int, count: int) -> list[float]:
    plan = build_plan(load_inventory(inventory))
    head, worker = plan.head.node, plan.workers[0].node
    env = f"SIZE_BYTES={size_bytes} PULLS={count} WORKER_RESOURCE={host_resource(worker.name)}"
    command = with_env_file(plan.paths.env_file, f"{env} {head.python} -")
    with SshTransport() as transport:
        result = transport.run(head, command, stdin=DRIVER, timeout_s=600)
    if not result.ok:
        raise SystemExit(f"the driver failed:\n{result.tail(40)}")
    seconds: list[float] = json.loads(result.stdout.strip().splitlines()[-1])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--pulls", type=int, default=5)
    args = parser.parse_args()
    size = args.size_mb * 2**20
    state = tempfile.mkdtemp(prefix="rtk-tlsx-")
    env = {**os.environ, "RTK_STATE_DIR": state}
    sandbox = create(2, name="tlsx", subnet="10.77.95")
    try:
        data = yaml.safe_load(sandbox.inventory_path.read_text())
        data.setdefault("ray", {})["tls"] = True
        tls_path = Path(state) / "tlsx-tls.yaml"
        tls_path.write_text(yaml.safe_dump(data))
        rates: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.rounds):
            for mode, inventory in (("off", sandbox.inventory_path), ("on", tls_path)):
                rtk("up", str(inventory), "--no-preflight", env=env)
                try:
                    rates[mode] += [size / 2**20 / s for s in pulls(inventory, size, args.pulls)]
                finally:
                    rtk("down", str(inventory), env=env)
                print(f"   ray.tls {mode}: {statistics.median(rates[mode]):8.1f} MB/s so far")
        off, on = (statistics.median(rates[m]) for m in ("off", "on"))
        print(f"\n{args.size_mb} MB objects, {len(rates['off'])} pulls per mode")
        print(f"ray.tls off {off:8.1f} MB/s")
        print(f"ray.tls on  {on:8.1f} MB/s")
        print(f"on/off      {on / off:8.2f}")
    finally:
        sandbox.destroy()


if __name__ == "__main__":
    main()
