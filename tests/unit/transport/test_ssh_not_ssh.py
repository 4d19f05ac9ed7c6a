"""SSH pointed at a port with no SSH server behind it: one clear rtk error, no traceback.

A real socket on this machine plays the wrong server (an HTTP server's answer, or a
close without a word); paramiko really connects to it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rtk

from toolkit.errors import TransportError
from toolkit.inventory import Inventory, load_inventory
from toolkit.transport.ssh import SshTransport

HTTP_ANSWER = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def serve(answer: bytes) -> Iterator[int]:
    """A listener on 127.0.0.1 that sends ``answer`` to each connection and closes it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(answer)
                conn.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture
def http_port() -> Iterator[int]:
    yield from serve(HTTP_ANSWER)


@pytest.fixture
def silent_close_port() -> Iterator[int]:
    yield from serve(b"")


def one_node(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster: c1\n"
        "defaults:\n"
        f"  ssh: {{port: {port}, connect_timeout_s: 5, known_hosts: {tmp_path / 'kh'}}}\n"
        "nodes:\n"
        "  - host: n1\n"
        "    address: 127.0.0.1\n"
    )
    return path


def inventory(tmp_path: Path, port: int) -> Inventory:
    return load_inventory(one_node(tmp_path, port))


@pytest.mark.parametrize("fixture", ["http_port", "silent_close_port"])
def test_a_port_that_is_no_ssh_server_is_named_with_what_to_check(
    tmp_path: Path, fixture: str, request: pytest.FixtureRequest
) -> None:
    port = request.getfixturevalue(fixture)
    node = inventory(tmp_path, port).head
    with SshTransport() as transport, pytest.raises(TransportError) as caught:
        transport.run(node, "true", timeout_s=10)
    message = str(caught.value)
    assert message.startswith(f"n1: no SSH server at {node.ssh.user}@127.0.0.1:{port}: ")
    assert "did not speak SSH (Error reading SSH protocol banner" in message
    assert f"(127.0.0.1, port {port})" in message and "ssh.port" in message


def test_rtk_env_says_so_in_one_line_without_paramikos_traceback(
    tmp_path: Path, http_port: int, state_dir: Path
) -> None:
    done = rtk("env", str(one_node(tmp_path, http_port)), timeout=60)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Exception (client)" not in done.stderr  # paramiko's own log line
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rtk: no network environment for n1: no SSH server at ")
    assert f"ssh.port in the inventory (127.0.0.1, port {http_port})" in last
