"""Bandwidth measurements: TCP throughput between two nodes, all-reduce bus bandwidth.

The primitives here run inside Ray workers on the nodes (``job`` places
them); they depend on the standard library, and on torch only for the all-reduce.

TCP: the receiver counts bytes until the sender closes its side, then answers with
the count; the sender's clock stops at that answer, so bytes still queued in socket
buffers are never counted as delivered (on a slow link they would be, for seconds).

All-reduce: the bus bandwidth convention of nccl-tests: ``algbw = bytes / time`` and
``busbw = algbw * 2 (n - 1) / n``, the rate each rank's link carries in a ring.
"""

from __future__ import annotations

import math
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.json_types import JsonObject

RESULT_PREFIX = "rtk-bandwidth: "  # the job's last line: this, then the result as JSON
PROGRESS_PREFIX = "rtk bandwidth: "  # the job's progress lines, shown to the user
CHUNK_BYTES = 1 << 20
ANSWER = struct.Struct("!Q")
CONNECT_TIMEOUT_S = 5.0
CPU_SIZES_BYTES = (1 << 20, 1 << 22, 1 << 24, 1 << 26)  # gloo: 1 to 64 MiB, kept short
GPU_SIZES_BYTES = (1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30)  # NCCL: to 1 GiB
MAX_SIZE_BYTES = 1 << 34  # 16 GiB: past any GPU's share of an all-reduce
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
SWEEP_BYTES = 1 << 27  # per message size, about this much data is reduced (2..20 times)


def busbw(algbw: float, ranks: int) -> float:
    """Bus bandwidth of an all-reduce from its algorithm bandwidth (nccl-tests)."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def ring_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """``(src, dst)`` pairs of a ring over ``names``: every node sends once, receives once."""
    if len(names) < 2:
        return []
    return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]


def default_sizes(backend: str) -> tuple[int, ...]:
    """The sweep's sizes when none are given: to 1 GiB on GPUs (NCCL), 64 MiB on CPUs."""
    return GPU_SIZES_BYTES if backend == "nccl" else CPU_SIZES_BYTES


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1M,16M,256M,1G`` as bytes, ascending and distinct (K, M, G are powers of 1024).

    A size may end in ``K``, ``M``, ``G`` (or ``KiB``, ``MiB``, ``GiB``, ``B``) or be
    plain bytes; each must be a multiple of 4 (float32 elements) up to 16 GiB.

    Raises:
        ValueError: A size that is not one of these, naming it and the text.
    """
    found: set[int] = set()
    for item in text.split(","):
        word = item.strip().upper().removesuffix("IB").removesuffix("B")
        unit = word[-1:] if word[-1:] in _UNITS else ""
        digits = word[: len(word) - len(unit)]
        if not digits.isdigit():
            raise ValueError(
                f"{item.strip()!r} in {text!r} is not a size: give sizes like 1M,16M,256M,1G "
                "(K, M, G: KiB, MiB, GiB) or bytes"
            )
        size = int(digits) * _UNITS[unit]
        if size < 4 or size % 4 or size > MAX_SIZE_BYTES:
            raise ValueError(
                f"{item.strip()!r} in {text!r} is {size} bytes: a size must be a multiple "
                "of 4 bytes (float32), from 4 bytes to 16G"
            )
        found.add(size)
    return tuple(sorted(found))


def iterations(size_bytes: int) -> int:
    """How many all-reduces of ``size_bytes`` to time: about SWEEP_BYTES, 2 to 20."""
    return max(2, min(20, math.ceil(SWEEP_BYTES / size_bytes)))


class TcpSink:
    """Accepts connections and counts their bytes; answers each sender with the count."""

    def __init__(self, host: str = "0.0.0.0") -> None:
        self._server = socket.create_server((host, 0), backlog=8)
        self.port: int = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="rtk-tcp-sink", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        total = 0
        buffer = bytearray(CHUNK_BYTES)
        with conn:
            conn.settimeout(60.0)
            try:
                while n := conn.recv_into(buffer):
                    total += n
                conn.sendall(ANSWER.pack(total))
            except OSError:
                return

    def close(self) -> None:
        """Stop accepting."""
        self._server.close()


@dataclass(frozen=True)
class TcpSendResult:
    """What one ``tcp_send`` delivered, or why it failed.

    Attributes:
        seconds: How long the test took (None: it never ran, its actor failed).
        sent_bytes: What the receiver counted (None: it failed).
        gbit_s: The delivered rate (None: it failed).
        error: Why it failed (None when it did not).
    """

    seconds: float | None = None
    sent_bytes: int | None = None
    gbit_s: float | None = None
    error: str | None = None

    def to_json(self) -> JsonObject:
        """As a localisation stream shows it (what was not measured left out)."""
        out: JsonObject = {}
        if self.error is not None:
            out["error"] = self.error
        if self.sent_bytes is not None:
            out["bytes"] = self.sent_bytes
        if self.seconds is not None:
            out["seconds"] = self.seconds
        if self.gbit_s is not None:
            out["gbit_s"] = self.gbit_s
        return out


def tcp_send(host: str, port: int, duration_s: float) -> TcpSendResult:
    """Send to a ``TcpSink`` for about ``duration_s``; the delivered rate in Gbit/s.

    Never raises: a failure is a result with ``error`` set.
    """
    payload = b"\0" * CHUNK_BYTES
    began = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as conn:
            conn.settimeout(max(30.0, 10 * duration_s))
            began = time.monotonic()
            sent = 0
            while time.monotonic() - began < duration_s:
                conn.sendall(payload)
                sent += len(payload)
            conn.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < ANSWER.size:
                more = conn.recv(ANSWER.size - len(answer))
                if not more:
                    raise ConnectionError("the receiver closed without answering")
                answer += more
            seconds = time.monotonic() - began
    except OSError as e:
        return TcpSendResult(time.monotonic() - began, error=f"{type(e).__name__}: {e}")
    (received,) = ANSWER.unpack(answer)
    if received != sent:
        return TcpSendResult(seconds, error=f"sent {sent} bytes, the receiver counted {received}")
    return TcpSendResult(seconds, sent, sent * 8 / seconds / 1e9)


def allreduce_sweep(
    dist: Any, torch: Any, device: Any, sizes_bytes: Sequence[int]
) -> list[dict[str, float]]:
    """Time all-reduces of float32 tensors of each size on an initialised process group.

    Every rank must call this with the same sizes. Returns per size the slowest
    rank's mean time per all-reduce (gathered), algbw and busbw in GB/s.
    """
    ranks = int(dist.get_world_size())
    results = []
    for size in sizes_bytes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        count = iterations(size)
        dist.all_reduce(tensor)  # warm-up: connections, buffers
        _sync(torch, device)
        dist.barrier()
        began = time.perf_counter()
        for _ in range(count):
            dist.all_reduce(tensor)
        _sync(torch, device)
        mean_s = (time.perf_counter() - began) / count
        slowest = torch.tensor([mean_s], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = float(slowest.item())
        algbw = size / seconds / 1e9
        results.append(
            {
                "bytes": size,
                "iterations": count,
                "seconds": seconds,
                "algbw_gb_s": algbw,
                "busbw_gb_s": busbw(algbw, ranks),
            }
        )
    return results


def _sync(torch: Any, device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)
