"""``facts.py``'s port checks against real sockets on this machine, and the request it reads.

A listening socket is reached, a closed port refused, and a listener whose queue is
full (SYNs dropped, as a firewall's DROP does) times out. The request travels inside
the script's text; the real script run by ``python -`` reads it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from toolkit.node.facts import CONNECT_TIMEOUT_S, REACH_CONCURRENCY, reach, targets
from toolkit.nodeinfo import FACTS
from toolkit.nodeinfo.reach_request import PeerPorts, ReachRequest, request_in, script_with
from toolkit.preflight import runner


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def full_queue() -> Iterator[int]:
    """A listener that never accepts, its queue filled: a new connection hangs."""
    with ExitStack() as stack:
        server = stack.enter_context(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = int(server.getsockname()[1])
        for _ in range(8):
            client = stack.enter_context(socket.socket())
            client.settimeout(0.3)
            try:
                client.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            pytest.fail("the listener's queue never filled")
        yield port


def test_a_listening_port_is_reached_and_a_closed_one_refused(listening: int) -> None:
    closed = closed_port()
    found = reach({"n2:gcs": ("127.0.0.1", listening), "n2:dashboard": ("127.0.0.1", closed)})
    assert found["n2:gcs"]["ok"] is True and found["n2:gcs"]["ms"] >= 0
    assert found["n2:dashboard"] == {"ok": False, "error": "Connection refused"}


def test_a_port_that_never_answers_times_out_after_the_connect_timeout(full_queue: int) -> None:
    began = time.monotonic()
    found = reach({"n3:object_manager": ("127.0.0.1", full_queue)}, timeout_s=0.4)
    # It waited the connect timeout (load only lengthens that), and did not hang.
    assert 0.35 <= time.monotonic() - began < 60
    assert found == {
        "n3:object_manager": {"ok": False, "error": "timed out after 0.4 s (filtered?)"}
    }


def test_hung_connections_are_tried_in_parallel_waves(monkeypatch: pytest.MonkeyPatch) -> None:
    # 12 hanging targets, 4 at a time: three waves, not twelve. Each connection waits
    # until 4 are in flight together (a barrier), so the waves show whatever the load.
    lock, in_flight, most = threading.Lock(), [0], [0]
    wave = threading.Barrier(4, timeout=60)

    def hangs(address: tuple[str, int], timeout: float) -> socket.socket:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        wave.wait()  # BrokenBarrierError, so "not ok", if fewer than 4 ever run at once
        with lock:
            in_flight[0] -= 1
        raise TimeoutError

    monkeypatch.setattr(socket, "create_connection", hangs)
    hung = {f"n{i}:gcs": ("127.0.0.1", 9) for i in range(12)}
    found = reach(hung, timeout_s=0.3, concurrency=4)
    assert all(not r["ok"] for r in found.values()) and len(found) == 12
    assert {r["error"] for r in found.values()} == {"timed out after 0.3 s (filtered?)"}
    assert most[0] == 4 and not wave.broken


def test_the_host_waits_for_the_waves_the_node_may_take() -> None:
    assert runner.CONNECT_TIMEOUT_S == CONNECT_TIMEOUT_S
    assert runner.REACH_CONCURRENCY == REACH_CONCURRENCY
    assert runner.facts_limit_s(0, 0) == runner.FACTS_TIMEOUT_S
    # One connection over a wave: two waves of the node's connect timeout.
    two_waves_s = 2 * CONNECT_TIMEOUT_S
    assert runner.facts_limit_s(0, REACH_CONCURRENCY + 1) == runner.FACTS_TIMEOUT_S + two_waves_s


def request(listening: int, closed: int) -> ReachRequest:
    return ReachRequest(
        {"node_manager": listening, "object_manager": closed, "gcs": listening},
        (
            PeerPorts("n2", "127.0.0.1", ("node_manager", "object_manager")),
            PeerPorts("n1", "127.0.0.1", ("node_manager", "object_manager", "gcs")),
        ),
    )


def test_the_script_and_the_host_read_the_request_alike(listening: int) -> None:
    sent = request(listening, closed_port())
    text = json.dumps(sent.to_json())
    assert targets(text) == sent.targets()
    assert ReachRequest.from_json(json.loads(text)) == sent
    assert targets("") == {}
    # Each peer once, each port number once: it grows with the peers, not peers x ports.
    assert text.count("127.0.0.1") == 2 and text.count(str(listening)) == 2


def test_the_real_script_reads_its_request_from_its_own_text(
    tmp_path: Path, listening: int
) -> None:
    closed = closed_port()
    sent = request(listening, closed)
    source = script_with(FACTS.source(), sent)
    assert request_in(FACTS.source(), source) == sent
    assert request_in(FACTS.source(), "print(1)\n") is None
    done = subprocess.run(
        [sys.executable, "-", str(tmp_path / "run"), "0"],
        input=source,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])["reach"]
    assert {k: v["ok"] for k, v in found.items()} == {
        "n2:node_manager": True,
        "n2:object_manager": False,
        "n1:node_manager": True,
        "n1:object_manager": False,
        "n1:gcs": True,
    }
    # Run by hand, without a request, it checks nothing.
    bare = subprocess.run(
        [sys.executable, "-", str(tmp_path / "run")],
        input=FACTS.source(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(bare.stdout.strip().splitlines()[-1])["reach"] == {}
