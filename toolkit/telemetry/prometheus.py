"""A Prometheus endpoint on each node: the sampler's newest readings, for live scraping.

``GET /metrics`` answers in Prometheus' text format, one gauge per numeric field, named
``rtk_<field>`` with labels ``node``, ``device`` and ``kind``. Only the newest reading
of each device is served; the trace files stay the record of the run.

The endpoint is closed (``endpoint`` decides where and how, ``serve`` serves):

- It binds one address, the node's cluster address (``RTK_NODE_IP`` from rtk's env
  file) or a host given explicitly; never every interface.
- It answers only a request with ``Authorization: Bearer <cluster token>``, the token
  read once at start from the 0600 file ``RAY_AUTH_TOKEN_PATH`` names; anything else
  gets 401 with ``WWW-Authenticate: Bearer``.
- A cluster with ``ray.auth: none`` has no token: the endpoint then binds 127.0.0.1
  only (see ``endpoint``).

Why not ``prometheus_client``: its built-in server (``start_http_server``) has no bearer
authentication (only TLS client certificates) and binds 0.0.0.0 unless told otherwise,
so rtk would wrap its WSGI app in an authenticating server anyway; what is left for it
is the text format of a few gauges, which ``render`` writes in twenty lines without a
registry of collectors to keep in step with the sampler's readings. The standard
library's server is kept, with the checks above.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from toolkit.errors import TelemetryError

logger = logging.getLogger(__name__)

SKIP = frozenset({"wall_s", "mono_s", "device", "kind", "power_source", "nvml_ts_us"})
LOOPBACK = "127.0.0.1"
NODE_IP_VARIABLE = "RTK_NODE_IP"
TOKEN_PATH_VARIABLE = "RAY_AUTH_TOKEN_PATH"


class HasLatest(Protocol):
    """Anything holding the newest reading per device (a ``Sampler``)."""

    latest: dict[str, dict[str, object]]


@dataclass(frozen=True)
class Endpoint:
    """Where a node's endpoint listens and the token it asks for.

    Attributes:
        host: The one address bound (never every interface).
        port: The TCP port.
        token: The bearer token a scrape must send; None only on loopback.
    """

    host: str
    port: int
    token: str | None = field(default=None, repr=False)


def endpoint(
    port: int, host: str | None = None, environ: Mapping[str, str] | None = None
) -> Endpoint:
    """Where and how this node serves ``/metrics``, from rtk's env file.

    The address is ``host`` when given, else ``RTK_NODE_IP``; the token is the content
    of the file ``RAY_AUTH_TOKEN_PATH`` names, read now.

    Without a token (the cluster runs with ``ray.auth: none``, or this is no rtk
    node), the endpoint binds 127.0.0.1 whatever address was asked for. Serving the
    cluster address without authentication is what this module exists to prevent, and
    refusing to start would leave ``--prometheus-port`` useless on such clusters; on
    loopback a Prometheus agent on the node itself can still scrape it, and nothing
    on the network can. To scrape from elsewhere, keep ``ray.auth: token`` (the
    default).

    Args:
        port: The TCP port (1-65535).
        host: The address to bind; None: ``RTK_NODE_IP``.
        environ: The environment to read (default ``os.environ``).

    Raises:
        TelemetryError: The token file cannot be read or is empty, no address is known
            (no ``host``, no ``RTK_NODE_IP``) while a token is, or the address is a
            wildcard (0.0.0.0, ::, empty).
    """
    env = os.environ if environ is None else environ
    token = _read_token(env.get(TOKEN_PATH_VARIABLE))
    wanted = host if host is not None else env.get(NODE_IP_VARIABLE)
    if wanted is not None and _is_wildcard(wanted):
        raise TelemetryError(
            f"telemetry endpoint: {wanted!r} would listen on every interface; give the "
            f"node's cluster address ({NODE_IP_VARIABLE}) or 127.0.0.1"
        )
    if token is None:
        if wanted is not None and not _is_loopback(wanted):
            logger.warning(
                "telemetry endpoint: no cluster token (%s unset: ray.auth is none), so "
                "/metrics is served on %s:%s only, not on %s; turn on ray.auth: token "
                "to scrape it from another machine",
                TOKEN_PATH_VARIABLE,
                LOOPBACK,
                port,
                wanted,
            )
        return Endpoint(wanted if wanted and _is_loopback(wanted) else LOOPBACK, port)
    if not wanted:
        raise TelemetryError(
            f"telemetry endpoint: no address to listen on: {NODE_IP_VARIABLE} is not set "
            "(is this node started by rtk up?); give the node's cluster address"
        )
    return Endpoint(wanted, port, token)


def render(latest: Mapping[str, Mapping[str, object]], node: str) -> str:
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


def serve(source: HasLatest, where: Endpoint, node: str) -> ThreadingHTTPServer:
    """Serve ``/metrics`` for ``source`` at ``where`` in a daemon thread; returns the server.

    A request without ``Authorization: Bearer <where.token>`` (when there is a token)
    gets 401 before its path is looked at; then any path but ``/metrics`` gets 404.

    Raises:
        TelemetryError: The address cannot be bound (taken, or not this node's), or
            it is not loopback and ``where`` has no token.
    """
    if where.token is None and not _is_loopback(where.host):
        raise TelemetryError(
            f"telemetry endpoint: {where.host} is not loopback, and there is no token to "
            "ask for: serve 127.0.0.1, or give the cluster token"
        )
    expected = where.token.encode() if where.token is not None else None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if expected is not None and not _authorized(
                self.headers.get("Authorization"), expected
            ):
                self._refuse()
                return
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = render(dict(source.latest), node).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self) -> None:
            body = b"send the cluster token: Authorization: Bearer <token>\n"
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="rtk telemetry"')
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            return

    host = where.host.strip("[]")
    server_class = _Server6 if ":" in host else ThreadingHTTPServer
    try:
        server = server_class((host, where.port), Handler)
    except OSError as e:
        raise TelemetryError(
            f"telemetry endpoint: cannot listen on {where.host}:{where.port}: {e}; "
            "choose another --prometheus-port"
        ) from e
    threading.Thread(target=server.serve_forever, name="rtk-prometheus", daemon=True).start()
    return server


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _authorized(header: str | None, token: bytes) -> bool:
    """True when ``header`` is ``Bearer <token>`` (any case of scheme), in constant time."""
    scheme, _, credentials = (header or "").strip().partition(" ")
    # http.server decodes headers as latin-1: encoding back gives the bytes sent.
    sent = credentials.strip().encode("latin-1", "replace")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent, token)


def _read_token(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise TelemetryError(
            f"telemetry endpoint: cannot read the cluster token {path} "
            f"({TOKEN_PATH_VARIABLE}): {e}; run rtk up again to put it back"
        ) from e
    if not token:
        raise TelemetryError(
            f"telemetry endpoint: the cluster token {path} ({TOKEN_PATH_VARIABLE}) is "
            "empty; run rtk up again to put it back"
        )
    return token


def _is_wildcard(host: str) -> bool:
    try:
        return not host.strip() or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _name(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
