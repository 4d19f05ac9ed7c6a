"""``job_client`` talks to the plan's head with the plan's token, whatever the shell says.

Two real HTTP servers stand in for two clusters' dashboards: the client Ray's own SDK
builds must reach the plan's, with its token, even when the environment points Ray
at the other one (``eval "$(rtk env OTHER --export)"``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.jobs.client import CLIENT_ENV, job_client
from toolkit.state.store import StateStore


class Dashboard:
    """A server answering Ray's version check, keeping each request's path and token."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                seen.append((self.path, self.headers.get("Authorization")))
                body = json.dumps({"version": "4", "ray_version": ray.__version__}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        # Below Linux's ephemeral range, as the inventory wants a dashboard port.
        for port in range(21000, 32000, 7):
            try:
                self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
                break
            except OSError:
                continue
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def dashboards() -> Iterator[tuple[Dashboard, Dashboard]]:
    ours, other = Dashboard(), Dashboard()
    yield ours, other
    ours.server.shutdown()
    other.server.shutdown()


def test_the_client_ignores_another_clusters_variables(
    tmp_path: Path, dashboards: tuple[Dashboard, Dashboard], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, other = dashboards
    data = {
        "cluster": "ours",
        "nodes": [{"host": "head", "address": "127.0.0.1"}],
        "ports": {"dashboard": ours.port},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    plan = build_plan(load_inventory(path))
    store = StateStore("ours", root=tmp_path / "state")
    token = store.token()
    other_token = tmp_path / "other-token"
    other_token.write_text("the-other-clusters-token")
    shell = {
        "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{other.port}",
        "RAY_ADDRESS": f"127.0.0.1:{other.port}",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(other_token),
        "RAY_AUTH_TOKEN": "the-other-clusters-token",
    }
    assert set(shell) == set(CLIENT_ENV)
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    job_client(plan, store)
    assert other.seen == []
    assert ours.seen and set(ours.seen) == {("/api/version", f"Bearer {token}")}
    # The shell's variables are back for whatever runs after (Ray's CLI in a subprocess).
    assert {name: os.environ[name] for name in shell} == shell
