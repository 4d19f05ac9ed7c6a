"""Bring-up time on the namespace sandbox: rtk up vs bare ssh + ray start vs ray up.

For each size (default 3 and 6 nodes), on one sandbox, in one run:

- rtk up: `rtk up INVENTORY` wall time (it returns once every node is alive).
- bare reference: the same `ray start` commands issued by hand over plain `ssh`, head
  first and then all workers in parallel, polled until every node is alive.
- ray up: Ray's cluster launcher with its local provider on the same nodes, polled
  until every node is alive or the limit passes ("not all nodes joined after T s").

Needs root (the sandbox), openssh-client and rsync (ray up uses it). Run by hand:
    python benchmarks/bringup.py [--sizes 3,6] [--repeats 3] [--ray-up-limit-s 120] [--skip-ray-up]
        [--no-preflight] [--tls]

--tls also times rtk up with ray.tls: true (a CA, a certificate per node, Ray's gRPC in
TLS), alternated with the runs without.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from common import bare_ray_start

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.nodeinfo import agent_source
from toolkit.sandbox import Sandbox, create

BARE_DIR = "/tmp/rtk-bare"
POLL_S = 0.25


def ssh_argv(sandbox: Sandbox, address: str) -> list[str]:
    return [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"UserKnownHostsFile={sandbox.known_hosts_path}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-i",
        str(sandbox.key_path),
        f"root@{address}",
    ]


def ssh(
    sandbox: Sandbox, address: str, command: str, stdin: str | None = None, check: bool = True
) -> str:
    done = subprocess.run(
        [*ssh_argv(sandbox, address), command],
        input=stdin,
        text=True,
        capture_output=True,
        timeout=600,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{address}: {command[:80]}... exited {done.returncode}: {done.stderr[-2000:]}"
        )
    return done.stdout


def alive_count(sandbox: Sandbox, head: str, python: str, url: str, gcs: str, env: str) -> int:
    out = ssh(
        sandbox, head, f"{env} {python} - status {url} {gcs}", stdin=agent_source(), check=False
    )
    try:
        nodes = json.loads(out.strip().splitlines()[-1]).get("nodes", [])
    except (json.JSONDecodeError, IndexError):
        return 0
    return sum(1 for n in nodes if n.get("state") == "ALIVE")


SEEN: dict[str, int] = {}


def wait_alive(count: int, limit_s: float, probe: Callable[[], int]) -> float | None:
    """The perf_counter time when ``probe()`` first reached ``count``; None past the limit.

    The most nodes seen alive is kept in ``SEEN["most"]`` for the report.
    """
    deadline = time.perf_counter() + limit_s
    SEEN["most"] = 0
    while time.perf_counter() < deadline:
        alive = probe()
        SEEN["most"] = max(SEEN["most"], alive)
        if alive >= count:
            return time.perf_counter()
        time.sleep(POLL_S)
    return None


def tls_inventory(sandbox: Sandbox, directory: str) -> Path:
    """The sandbox's inventory with ``ray.tls: true``, written in ``directory``."""
    data = yaml.safe_load(sandbox.inventory_path.read_text())
    data.setdefault("ray", {})["tls"] = True
    path = Path(directory) / f"{sandbox.name}-tls.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def time_rtk(
    sandbox: Sandbox, env: dict[str, str], extra: list[str], inventory: Path | None = None
) -> float:
    inventory = inventory or sandbox.inventory_path
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "toolkit", "up", str(inventory), *extra],
        env=env,
        check=True,
        capture_output=True,
        timeout=900,
    )
    took = time.perf_counter() - began
    subprocess.run(
        [sys.executable, "-m", "toolkit", "down", str(inventory)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return took


def time_bare(sandbox: Sandbox) -> float:
    plan = build_plan(load_inventory(sandbox.inventory_path))
    head = plan.head
    began = time.perf_counter()
    ssh(sandbox, head.node.address, bare_ray_start(head, BARE_DIR, head.node.address))
    with ThreadPoolExecutor(max_workers=len(plan.workers) or 1) as pool:
        list(
            pool.map(
                lambda w: ssh(sandbox, w.node.address, bare_ray_start(w, BARE_DIR, w.node.address)),
                plan.workers,
            )
        )
    env = "env RAY_AUTH_MODE=disabled"
    reached = wait_alive(
        len(plan.nodes),
        300,
        lambda: alive_count(
            sandbox, head.node.address, head.node.python, plan.dashboard_url, plan.head_address, env
        ),
    )
    stop_everywhere(sandbox, head.node.python, BARE_DIR)
    if reached is None:
        raise RuntimeError("bare reference: not all nodes joined after 300 s")
    return reached - began


def stop_everywhere(sandbox: Sandbox, python: str, marker: str) -> None:
    for node in sandbox.nodes:
        ssh(sandbox, node.address, f"{python} - stop {marker} 8", stdin=agent_source(), check=False)


def time_ray_up(sandbox: Sandbox, limit_s: float) -> tuple[float | None, float, int]:
    """Seconds until all nodes are alive (None: not within limit_s), ray up's own time, and
    the most nodes seen alive."""
    inv = load_inventory(sandbox.inventory_path)
    python = inv.head.python
    ray = f"{python} -m ray.scripts.scripts"
    head_ip = inv.head.address
    config = {
        "cluster_name": f"bench{len(sandbox.nodes)}",
        "provider": {
            "type": "local",
            "head_ip": head_ip,
            "worker_ips": [n.address for n in inv.workers],
        },
        "auth": {"ssh_user": "root", "ssh_private_key": str(sandbox.key_path)},
        "max_workers": len(inv.workers),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 5,
        "file_mounts": {},
        "setup_commands": [],
        "initialization_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [
            f"{ray} stop",
            f"RAY_AUTH_MODE=disabled {ray} start --head --port=6379 --dashboard-host=0.0.0.0 "
            "--autoscaling-config=~/ray_bootstrap_config.yaml --disable-usage-stats",
        ],
        "worker_start_ray_commands": [
            f"{ray} stop",
            f"RAY_AUTH_MODE=disabled {ray} start --address=$RAY_HEAD_IP:6379 --disable-usage-stats",
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
        began = time.perf_counter()
        up = subprocess.run(
            [*ray.split(), "up", "-y", "--no-config-cache", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        up_s = time.perf_counter() - began
        if up.returncode != 0:
            print(up.stdout[-3000:], up.stderr[-3000:], file=sys.stderr)
        left = max(0.0, limit_s - up_s)
        url = f"http://{head_ip}:8265"
        reached = wait_alive(
            len(inv.nodes),
            left,
            lambda: alive_count(
                sandbox, head_ip, python, url, f"{head_ip}:6379", "env RAY_AUTH_MODE=disabled"
            ),
        )
        subprocess.run(
            [*ray.split(), "down", "-y", str(path)],
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
    for node in sandbox.nodes:  # ray down may leave workers behind; stop them the hard way
        sandbox.run_in(node.name, ["pkill", "-9", "-f", "ray"], 30)
    return (None if reached is None else reached - began), up_s, SEEN["most"]


def _runs(samples: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="3,6")
    parser.add_argument("--ray-up-limit-s", type=float, default=120.0)
    parser.add_argument("--skip-ray-up", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="rtk and bare, alternated")
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="rtk up --no-preflight: without the checks after, which bare ray start lacks",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="also time rtk up with ray.tls: true (alternated with the runs without)",
    )
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="rtk-bench-")
    atexit.register(shutil.rmtree, state, True)
    env = {**os.environ, "RTK_STATE_DIR": state}
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"== {size} nodes: creating sandbox", flush=True)
        sandbox = create(size, name=f"bench{size}", subnet=f"10.77.{30 + size}")
        try:
            # Alternated, medians: one sample each varies by 10-20% on a 2-core machine.
            rtk_runs, bare_runs, tls_runs = [], [], []
            tls = tls_inventory(sandbox, state) if args.tls else None
            for _ in range(args.repeats):
                extra = ["--no-preflight"] if args.no_preflight else []
                rtk_runs.append(time_rtk(sandbox, env, extra))
                if tls is not None:
                    tls_runs.append(time_rtk(sandbox, env, extra, tls))
                bare_runs.append(time_bare(sandbox))
            rtk_s, bare_s = statistics.median(rtk_runs), statistics.median(bare_runs)
            print(f"   rtk up {rtk_s:.2f} s (median of {_runs(rtk_runs)})", flush=True)
            if tls_runs:
                tls_s = statistics.median(tls_runs)
                print(f"   rtk up, ray.tls {tls_s:.2f} s (median of {_runs(tls_runs)})", flush=True)
            print(f"   bare ssh + ray start {bare_s:.2f} s (median of {_runs(bare_runs)})")
            ray_up: tuple[float | None, float, int] | None = None
            if not args.skip_ray_up:
                ray_up = time_ray_up(sandbox, args.ray_up_limit_s)
                shown = (
                    f"{ray_up[0]:.2f} s"
                    if ray_up[0] is not None
                    else f"not all nodes joined after {args.ray_up_limit_s:g} s"
                )
                print(
                    f"   ray up {shown} (ray up itself returned after {ray_up[1]:.2f} s)",
                    flush=True,
                )
            rows.append((size, rtk_s, bare_s, ray_up))
        finally:
            sandbox.destroy()
    print()
    print(
        f"{'nodes':>5} {'rtk up':>8} {'bare':>8} {'rtk/bare':>9} {'ray up':>24} {'rtk/ray up':>10}"
    )
    for size, rtk_s, bare_s, ray_up in rows:
        if ray_up is None:
            ray_text, ratio = "skipped", "-"
        elif ray_up[0] is None:
            ray_text, ratio = (
                f"> {args.ray_up_limit_s:g} s (not all)",
                "< " + f"{rtk_s / args.ray_up_limit_s:.2f}",
            )
        else:
            ray_text, ratio = f"{ray_up[0]:.2f} s", f"{rtk_s / ray_up[0]:.2f}"
        print(
            f"{size:>5} {rtk_s:>7.2f}s {bare_s:>7.2f}s {rtk_s / bare_s:>9.2f} {ray_text:>24} "
            f"{ratio:>10}"
        )


if __name__ == "__main__":
    main()
