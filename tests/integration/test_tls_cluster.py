"""``ray.tls: true`` on the real 3-node SSH sandbox: Ray's gRPC in TLS, end to end.

One cluster with TLS is shared by the tests in order: its bring-up and preflight, the
files on the nodes, a Ray task on every node, a gloo all-reduce, clients without the
cluster's certificates refused, and the bridge between the nodes carrying no token in
clear. The last test takes it down (the TLS files go with it), brings the same nodes
up without TLS and captures the same traffic: there the token is in clear, so the
capture is shown able to find it. Both bring-up times are printed (``-s``).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import failure_text, require, rtk
from gloo_allreduce import GLOO_ALLREDUCE

from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.cluster.smoke import run_smoke
from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox
from toolkit.shell import quote, with_env_file
from toolkit.state.store import StateStore
from toolkit.state.tls import new_ca, new_leaf, subject_names, utc_now
from toolkit.transport import SshTransport

pytestmark = pytest.mark.ray

# Dials the head's GCS with Ray's own gRPC channel helper (which reads RAY_USE_TLS and
# the RAY_TLS_* files as every Ray process does) and waits for the channel: a TLS
# handshake the server accepts, or not within the limit.
DIAL_GCS = """
import os, sys
import grpc
from ray._private.grpc_utils import init_grpc_channel
channel = init_grpc_channel(os.environ["RTK_HEAD_ADDRESS"])
try:
    grpc.channel_ready_future(channel).result(timeout=8)
except grpc.FutureTimeoutError:
    print("refused"); sys.exit(1)
print("connected")
"""


def names(sandbox: Sandbox) -> list[str]:
    return [n.name for n in sandbox.nodes]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("tls-state"))}


@pytest.fixture(scope="module")
def tls_inventory(sandbox3: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load(sandbox3.inventory_path.read_text())
    data.setdefault("ray", {})["tls"] = True
    path = tmp_path_factory.mktemp("tls-inv") / "sb3-tls.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def plan(tls_inventory: Path) -> ClusterPlan:
    return build_plan(load_inventory(tls_inventory))


@pytest.fixture(scope="module")
def cluster(
    tls_inventory: Path, state: dict[str, str], ray_available: None
) -> Iterator[dict[str, Any]]:
    began = time.perf_counter()
    done = rtk("up", str(tls_inventory), "--json", env=state)
    took_s = time.perf_counter() - began
    assert done.returncode == 0, done.stderr
    print(f"\nrtk up with ray.tls: {took_s:.2f} s")
    yield {**json.loads(done.stdout), "took_s": took_s}
    rtk("down", str(tls_inventory), env=state)


def test_up_with_tls_passes_its_auth_and_tls_checks(
    cluster: dict[str, Any], sandbox3: Sandbox
) -> None:
    assert cluster["status"]["alive"] == names(sandbox3)
    checks = [c for c in cluster["preflight"]["checks"] if c["name"] in ("ray.auth", "ray.tls")]
    assert sorted((c["name"], c["scope"], c["status"]) for c in checks) == sorted(
        (name, node, "pass") for name in ("ray.auth", "ray.tls") for node in names(sandbox3)
    )


def test_tls_files_are_private_on_every_node(
    cluster: dict[str, Any], tls_inventory: Path, plan: ClusterPlan, state: dict[str, str]
) -> None:
    files = [plan.paths.tls_ca_file, plan.paths.tls_cert_file, plan.paths.tls_key_file]
    done = rtk("exec", str(tls_inventory), "--json", "--", "stat", "-c", "%a", *files, env=state)
    assert done.returncode == 0, done.stderr
    for run in json.loads(done.stdout)["nodes"]:
        assert run["stdout"].split() == ["600", "600", "600"]


def test_a_ray_task_lands_on_every_node(
    cluster: dict[str, Any], plan: ClusterPlan, sandbox3: Sandbox
) -> None:
    with SshTransport() as transport:
        ran = run_smoke(plan, transport)
    assert {name: where["hostname"] for name, where in ran.items()} == {
        n: n for n in names(sandbox3)
    }


def test_gloo_allreduce_across_the_nodes(
    cluster: dict[str, Any], plan: ClusterPlan, sandbox3: Sandbox
) -> None:
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    head = plan.head.node
    command = with_env_file(
        plan.paths.env_file, f"HOSTS={','.join(names(sandbox3))} {head.python} -"
    )
    with SshTransport() as transport:
        result = transport.run(head, command, stdin=GLOO_ALLREDUCE, timeout_s=300)
    assert result.ok, result.tail(40)
    ranks = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["sum"] for r in ranks] == [6.0, 6.0, 6.0]


def test_a_job_and_the_ray_cli_on_a_node_reach_the_cluster(
    cluster: dict[str, Any], tls_inventory: Path, state: dict[str, str]
) -> None:
    """The Jobs API (HTTP) takes the job; its driver and ``ray status`` speak TLS."""
    count = "import ray; ray.init(); print('alive', sum(n['Alive'] for n in ray.nodes()))"
    done = rtk("launch", str(tls_inventory), "--", "python", "-c", count, env=state)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "alive 3" in done.stdout + done.stderr
    status = rtk("shell", str(tls_inventory), "--", "ray", "status", env=state)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "rtk_host:node3" in status.stdout


def test_rtk_train_with_telemetry_runs_over_tls(
    cluster: dict[str, Any],
    tls_inventory: Path,
    state: dict[str, str],
    sandbox3: Sandbox,
) -> None:
    """Ray Train's workers, the samplers and the report, every gRPC of it in TLS."""
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    # Under /tmp, which each sandbox node mounts for itself: no shared filesystem, so
    # the run's files come back through the head (metrics.jsonl from rank 0's node).
    output = Path(f"/tmp/rtk-tls-runs-{uuid.uuid4().hex[:8]}")
    try:
        trained_over_tls(output, tls_inventory, state, sandbox3)
    finally:
        shutil.rmtree(output, ignore_errors=True)


def trained_over_tls(
    output: Path, tls_inventory: Path, state: dict[str, str], sandbox3: Sandbox
) -> None:
    done = rtk(
        "train",
        str(tls_inventory),
        *("--model-size", "tiny", "--num-workers", "3", "--max-steps", "10"),
        *("--output-dir", str(output), "--run-id", "tls"),
        env=state,
        timeout=600,
    )
    assert done.returncode == 0, failure_text(done)
    run_dir = output / "tls"
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").open()]
    assert steps == list(range(1, 11))
    manifest = json.loads((run_dir / "telemetry" / "manifest.json").read_text())
    assert sorted(manifest["nodes"]) == names(sandbox3)
    assert all(n["status"] == "complete" and n["samples"] > 0 for n in manifest["nodes"].values())
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["run"]["steps"] == 10
    assert sorted(summary["nodes"]) == names(sandbox3)


def test_clients_without_the_clusters_certificates_are_refused(
    cluster: dict[str, Any], plan: ClusterPlan
) -> None:
    worker = plan.workers[0].node
    # A stranger's CA and a certificate it signed for this very address.
    now = utc_now()
    stranger = new_ca(plan.inventory.name, now)
    leaf = new_leaf(stranger, worker.name, subject_names([worker.address]), now)
    files = {"/tmp/rtk-stranger-ca.crt": stranger.cert_pem, "/tmp/rtk-stranger.crt": leaf.cert_pem}
    files["/tmp/rtk-stranger.key"] = leaf.key_pem

    def dial(transport: SshTransport, prefix: str) -> str:
        line = with_env_file(plan.paths.env_file, f"{prefix}{worker.python} -")
        result = transport.run(worker, line, stdin=DIAL_GCS, timeout_s=60)
        return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.tail()

    stranger_env = (
        "RAY_TLS_CA_CERT=/tmp/rtk-stranger-ca.crt RAY_TLS_SERVER_CERT=/tmp/rtk-stranger.crt "
        "RAY_TLS_SERVER_KEY=/tmp/rtk-stranger.key "
    )
    with SshTransport() as transport:
        for path, data in files.items():
            transport.put(worker, path, data, mode=0o600)
        assert dial(transport, "") == "connected"  # the node's own certificate: the control
        assert dial(transport, "RAY_USE_TLS=0 ") == "refused"
        assert dial(transport, stranger_env) == "refused"
        # The cluster's CA trusted, but a certificate it never signed: the server refuses.
        trusting = stranger_env.replace("/tmp/rtk-stranger-ca.crt", plan.paths.tls_ca_file)
        assert dial(transport, trusting) == "refused"
        transport.run(worker, "rm -f " + " ".join(quote(p) for p in files), timeout_s=30)


def capture_between_nodes(sandbox: Sandbox, work: Callable[[], None], out: Path) -> bytes:
    """The bridge's packets between the nodes (not the host's SSH) while ``work`` runs."""
    require(shutil.which("tcpdump") is not None, "tcpdump is needed (scripts/system-packages.sh)")
    host = f"{sandbox.layout.subnet}.1"
    argv = ["tcpdump", "-i", sandbox.layout.bridge, "-U", "-s", "0", "-w", str(out)]
    argv += [f"net {sandbox.layout.subnet}.0/24 and not host {host}"]
    dump = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert dump.stderr is not None
        assert "listening on" in dump.stderr.readline()
        work()
        time.sleep(1.0)
    finally:
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)
    return out.read_bytes()


def test_the_token_crosses_the_bridge_only_encrypted(
    cluster: dict[str, Any],
    plan: ClusterPlan,
    sandbox3: Sandbox,
    state: dict[str, str],
    tmp_path: Path,
) -> None:
    token = StateStore(plan.inventory.name, Path(state["RTK_STATE_DIR"])).read_token()
    assert token

    def smoke() -> None:
        with SshTransport() as transport:
            run_smoke(plan, transport)

    captured = capture_between_nodes(sandbox3, smoke, tmp_path / "tls.pcap")
    assert len(captured) > 10_000  # Ray's traffic between the nodes was seen
    assert token.encode() not in captured


def test_down_removes_the_tls_files_and_without_tls_the_token_is_in_clear(
    cluster: dict[str, Any],
    tls_inventory: Path,
    plan: ClusterPlan,
    sandbox3: Sandbox,
    state: dict[str, str],
    tmp_path: Path,
) -> None:
    done = rtk("down", str(tls_inventory), env=state)
    assert done.returncode == 0, done.stderr
    for node in sandbox3.nodes:
        for path in (plan.paths.tls_key_file, plan.paths.tls_cert_file, plan.paths.tls_ca_file):
            assert sandbox3.run_in(node.name, ["test", "-e", path], 30).returncode == 1
        # A healthy cluster's down leaves no Ray process (test_ssh_cluster: a dead head's).
        left = sandbox3.run_in(node.name, ["pgrep", "-a", "-f", "raylet|gcs_server|^ray::"], 30)
        assert left.returncode == 1, (node.name, left.stdout)
    assert not (Path(state["RTK_STATE_DIR"]) / plan.inventory.name).exists()

    inventory = str(sandbox3.inventory_path)
    began = time.perf_counter()
    done = rtk("up", inventory, "--json", env=state)
    took_s = time.perf_counter() - began
    assert done.returncode == 0, done.stderr
    print(f"\nrtk up without ray.tls: {took_s:.2f} s (with: {cluster['took_s']:.2f} s)")
    try:
        plain = build_plan(load_inventory(sandbox3.inventory_path))
        checks = json.loads(done.stdout)["preflight"]["checks"]
        assert {c["status"] for c in checks if c["name"] == "ray.tls"} == {"warn"}
        token = StateStore(plain.inventory.name, Path(state["RTK_STATE_DIR"])).read_token()
        assert token

        def smoke() -> None:
            with SshTransport() as transport:
                run_smoke(plain, transport)

        captured = capture_between_nodes(sandbox3, smoke, tmp_path / "plain.pcap")
        assert token.encode() in captured
    finally:
        rtk("down", inventory, env=state)
