"""The live Prometheus endpoint: text format, a closed server, and a sampler serving it.

Real sockets throughout: the endpoint binds one loopback address (127.0.0.2; Linux
routes all of 127/8 to ``lo``) so a connection to another (127.0.0.1) shows it listens
nowhere else.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import TelemetryError
from toolkit.telemetry.node_sampler import NodeSampler
from toolkit.telemetry.prometheus import Endpoint, endpoint, render, serve

TOKEN = "a" * 32 + "b" * 32
NODE_IP = "127.0.0.2"


def test_render_is_prometheus_text_with_one_gauge_per_numeric_field() -> None:
    text = render(
        {
            "GPU-1": {"wall_s": 5.0, "kind": "gpu", "power_w": 312.5, "power_source": "nvml"},
            "host": {"wall_s": 5.1, "kind": "host", "cpu_util_pct": 40, "note": "x"},
        },
        node='n"1',
    )
    lines = text.splitlines()
    assert "# TYPE rtk_power_w gauge" in lines
    assert 'rtk_power_w{node="n\\"1",device="GPU-1",kind="gpu"} 312.5' in lines
    assert 'rtk_cpu_util_pct{node="n\\"1",device="host",kind="host"} 40' in lines
    assert 'rtk_sample_wall_s{node="n\\"1",device="host",kind="host"} 5.1' in lines
    assert not any("power_source" in line or "note" in line for line in lines)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "auth_token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def get(url: str, token: str | None = None, scheme: str = "Bearer") -> tuple[int, str, Any]:
    """Status, body and headers of a GET; an HTTP error status is an answer too."""
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


class Readings:
    def __init__(self) -> None:
        self.latest = {"host": {"wall_s": 7.0, "kind": "host", "cpu_util_pct": 12.5}}


@pytest.fixture
def closed_server() -> Iterator[tuple[ThreadingHTTPServer, str]]:
    port = free_port(NODE_IP)
    server = serve(Readings(), Endpoint(NODE_IP, port, TOKEN), node="n1")
    try:
        yield server, f"http://{NODE_IP}:{port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_without_the_right_token_is_refused(
    closed_server: tuple[ThreadingHTTPServer, str],
) -> None:
    _, url = closed_server
    for token, scheme in [
        (None, ""),
        ("wrong", "Bearer"),
        (TOKEN[:-1], "Bearer"),
        (TOKEN, "Basic"),
        (TOKEN + "x", "Bearer"),
        ("", "Bearer"),
    ]:
        status, body, headers = get(f"{url}/metrics", token, scheme)
        assert (status, headers["WWW-Authenticate"]) == (401, 'Bearer realm="rtk telemetry"')
        assert "rtk_" not in body, (token, scheme)
    # Paths are not told apart before the token is checked.
    assert get(f"{url}/other")[0] == 401


def test_the_right_token_gets_the_metrics(closed_server: tuple[ThreadingHTTPServer, str]) -> None:
    _, url = closed_server
    status, body, _ = get(f"{url}/metrics", TOKEN)
    assert status == 200
    assert 'rtk_cpu_util_pct{node="n1",device="host",kind="host"} 12.5' in body
    assert get(f"{url}/metrics", TOKEN, scheme="bearer")[0] == 200  # the scheme's case is free
    assert get(f"{url}/other", TOKEN)[0] == 404


def test_the_endpoint_listens_on_its_address_only(
    closed_server: tuple[ThreadingHTTPServer, str],
) -> None:
    server, _ = closed_server
    assert server.server_address[0] == NODE_IP
    with pytest.raises(ConnectionRefusedError), socket.socket() as s:
        s.settimeout(5)
        s.connect(("127.0.0.1", server.server_address[1]))


def test_the_address_is_the_nodes_cluster_address_and_the_token_its_file(
    token_file: Path,
) -> None:
    env = {"RTK_NODE_IP": "10.0.0.7", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    assert endpoint(9464, environ=env) == Endpoint("10.0.0.7", 9464, TOKEN)
    assert endpoint(9464, "10.0.0.8", environ=env) == Endpoint("10.0.0.8", 9464, TOKEN)
    assert TOKEN not in repr(endpoint(9464, environ=env))


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "[::]"])
def test_every_interface_is_refused(token_file: Path, host: str) -> None:
    env = {"RTK_NODE_IP": host, "RAY_AUTH_TOKEN_PATH": str(token_file)}
    with pytest.raises(TelemetryError, match="every interface"):
        endpoint(9464, environ=env)
    with pytest.raises(TelemetryError, match="every interface"):
        endpoint(9464, host, environ={})


def test_a_token_without_an_address_or_an_unreadable_token_is_refused(
    token_file: Path, tmp_path: Path
) -> None:
    with pytest.raises(TelemetryError, match="RTK_NODE_IP is not set"):
        endpoint(9464, environ={"RAY_AUTH_TOKEN_PATH": str(token_file)})
    missing = {"RTK_NODE_IP": "10.0.0.7", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")}
    with pytest.raises(TelemetryError, match="cannot read the cluster token .*none"):
        endpoint(9464, environ=missing)
    (tmp_path / "empty").write_text("\n")
    empty = {"RTK_NODE_IP": "10.0.0.7", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "empty")}
    with pytest.raises(TelemetryError, match="is empty"):
        endpoint(9464, environ=empty)


def test_without_a_token_only_loopback_is_served(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert endpoint(9464, environ={"RTK_NODE_IP": "10.0.0.7"}) == Endpoint("127.0.0.1", 9464)
    assert "served on 127.0.0.1:9464 only, not on 10.0.0.7" in caplog.text
    assert endpoint(9464, environ={}) == Endpoint("127.0.0.1", 9464)
    assert endpoint(9464, NODE_IP, environ={}) == Endpoint(NODE_IP, 9464)
    with pytest.raises(TelemetryError, match="not loopback"):
        serve(Readings(), Endpoint("10.0.0.7", 9464), node="n1")


def test_a_port_in_use_is_one_clear_error(closed_server: tuple[ThreadingHTTPServer, str]) -> None:
    server, _ = closed_server
    with pytest.raises(TelemetryError, match=f"cannot listen on {NODE_IP}:"):
        serve(Readings(), Endpoint(NODE_IP, server.server_address[1], TOKEN), node="n1")


def sampler_process(out: Path, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolkit.telemetry.sampler",
            str(out),
            "--sensors",
            "host",
            "--prometheus-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"RTK_NODE": "nodeA", "PATH": "/usr/bin:/bin", **env},
    )


def test_a_sampler_serves_its_newest_readings(tmp_path: Path, token_file: Path) -> None:
    """As on an rtk node: the cluster address and the token file from the env file."""
    port = free_port(NODE_IP)
    env = {"RTK_NODE_IP": NODE_IP, "RAY_AUTH_TOKEN_PATH": str(token_file)}
    proc = sampler_process(tmp_path / "s.arrows", port, env)
    url = f"http://{NODE_IP}:{port}"
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["started"]
        time.sleep(0.5)
        assert get(f"{url}/metrics")[0] == 401
        status, body, _ = get(f"{url}/metrics", TOKEN)
        assert status == 200
        assert 'rtk_memory_used_bytes{node="nodeA",device="host",kind="host"}' in body
        first = _value(body, "rtk_sample_wall_s")
        time.sleep(0.4)
        assert _value(get(f"{url}/metrics", TOKEN)[1], "rtk_sample_wall_s") > first  # live
        assert get(f"{url}/other", TOKEN)[0] == 404
        with pytest.raises(ConnectionRefusedError), socket.socket() as s:
            s.connect(("127.0.0.1", port))
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_sampler_whose_token_is_gone_says_so_and_samples_nothing(tmp_path: Path) -> None:
    env = {"RTK_NODE_IP": NODE_IP, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "gone")}
    proc = sampler_process(tmp_path / "s.arrows", free_port(NODE_IP), env)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == TelemetryError.exit_code
    assert stderr.startswith("rtk: telemetry endpoint: cannot read the cluster token")
    assert "Traceback" not in stderr and stdout == ""
    assert not list(tmp_path.glob("s*.arrows"))


def test_the_node_samplers_endpoint_takes_the_nodes_address_and_token(
    tmp_path: Path, token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--prometheus-port`` as the session hands it to each node's sampler actor.

    The actor's class is run in this process (the Ray actor wraps it unchanged), with
    the variables rtk's env file gives every process on a node.
    """
    monkeypatch.setenv("RTK_NODE_IP", NODE_IP)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    monkeypatch.setenv("RTK_NODE", "gpu07")
    monkeypatch.setenv("RTK_CLUSTER_DIR", str(tmp_path))
    port = free_port(NODE_IP)
    actor = NodeSampler.__ray_metadata__.modified_class("k", "gpu07", "host", 20.0, None, port)
    actor.start()
    try:
        time.sleep(0.3)
        assert actor.server.server_address == (NODE_IP, port)
        assert get(f"http://{NODE_IP}:{port}/metrics")[0] == 401
        status, body, _ = get(f"http://{NODE_IP}:{port}/metrics", TOKEN)
        assert status == 200 and 'node="gpu07",device="host"' in body
    finally:
        actor.stop()
    with pytest.raises(OSError):
        socket.create_connection((NODE_IP, port), timeout=2)


def _value(body: str, name: str) -> float:
    line = next(x for x in body.splitlines() if x.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])
