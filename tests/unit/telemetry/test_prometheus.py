"""The live Prometheus endpoint: text format, and a real sampler process serving it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from toolkit.telemetry.prometheus import render


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_sampler_serves_its_newest_readings(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolkit.telemetry.sampler",
            str(tmp_path / "s.jsonl"),
            "--sensors",
            "host",
            "--prometheus-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={"RTK_NODE": "nodeA", "PATH": "/usr/bin:/bin"},
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["started"]
        time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
        assert 'rtk_memory_used_bytes{node="nodeA",device="host",kind="host"}' in body
        first = _value(body, "rtk_sample_wall_s")
        time.sleep(0.4)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert _value(r.read().decode(), "rtk_sample_wall_s") > first  # live, not a snapshot
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    finally:
        proc.terminate()
        proc.wait(10)


def _value(body: str, name: str) -> float:
    line = next(x for x in body.splitlines() if x.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])
