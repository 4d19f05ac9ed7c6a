"""A Prometheus endpoint on each node: the sampler's newest readings, for live scraping.

``GET /metrics`` answers in Prometheus' text format, one gauge per numeric field, named
``rtk_<field>`` with labels ``node``, ``device`` and ``kind``. Only the newest reading
of each device is served; the trace files stay the record of the run.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

SKIP = frozenset({"wall_s", "mono_s", "device", "kind", "power_source", "nvml_ts_us"})


class HasLatest(Protocol):
    """Anything holding the newest reading per device (a ``Sampler``)."""

    latest: dict[str, dict[str, Any]]


def render(latest: Mapping[str, Mapping[str, Any]], node: str) -> str:
    """The text exposition of ``latest`` (device -> newest reading)."""
    series: dict[str, list[str]] = {}
    for device, reading in sorted(latest.items()):
        labels = (
            f'node="{_escape(node)}",device="{_escape(device)}",'
            f'kind="{_escape(str(reading.get("kind", "")))}"'
        )
        for key, value in reading.items():
            if key in SKIP or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            series.setdefault(f"rtk_{_name(key)}", []).append(f"{{{labels}}} {value}")
        if "wall_s" in reading:
            series.setdefault("rtk_sample_wall_s", []).append(f"{{{labels}}} {reading['wall_s']}")
    lines = []
    for name, samples in sorted(series.items()):
        lines.append(f"# TYPE {name} gauge")
        lines += [f"{name}{sample}" for sample in samples]
    return "\n".join(lines) + "\n"


def serve(source: HasLatest, port: int, node: str, host: str = "") -> ThreadingHTTPServer:
    """Serve ``/metrics`` for ``source`` on ``port`` in a daemon thread; returns the server."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = render(dict(source.latest), node).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="rtk-prometheus", daemon=True).start()
    return server


def _name(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
