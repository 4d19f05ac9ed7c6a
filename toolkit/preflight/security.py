"""Ray's authentication and TLS on every node, as ``rtk up`` left them: ``ray.auth``, ``ray.tls``.

What a node runs with is what its env file says (every Ray process there read it).
The node's facts script sends that file back, with the certificate and CA it names
(never the key) where it turns TLS on, in the same call as the rest of its facts
(``NodeFacts.ray_files``): no round trip of its own. The grading is pure
(``security_checks``): a setting the inventory asks for and a node lacks fails, as
does a certificate that has expired, does not verify against the node's CA, does not
name the node's address, or a CA other than the head's; a setting that is off where
the inventory leaves it off warns, since the token then crosses the network in clear.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.preflight.result import Check
from toolkit.shell import parse_env_file, ray_tls_on
from toolkit.state.tls import RENEW_BEFORE, TlsError, cert_info, subject_names, verify_leaf

RESTART_HINT = "rtk down, then rtk up: the nodes start with the inventory's settings"


@dataclass(frozen=True)
class NodeSecurity:
    """What one node's files say: its env (None: no env file), certificate and CA."""

    env: Mapping[str, str] | None
    cert_pem: bytes | None = None
    ca_pem: bytes | None = None


def node_security(ray_files: Mapping[str, str] | None) -> NodeSecurity:
    """A node's ``NodeSecurity`` from the files its facts sent back (``ray_files``)."""
    if ray_files is None or "env" not in ray_files:
        return NodeSecurity(None)
    cert, ca = ray_files.get("cert"), ray_files.get("ca")
    return NodeSecurity(
        parse_env_file(ray_files["env"]),
        None if cert is None else cert.encode(),
        None if ca is None else ca.encode(),
    )


def security_checks(
    plan: ClusterPlan,
    found: Mapping[str, NodeSecurity | str],
    now: datetime.datetime,
) -> list[Check]:
    """``ray.auth`` and ``ray.tls`` for every node of ``found``.

    Nodes whose files could not be read (``connect.node`` reports them) and nodes
    without an env file (the cluster is not up there) get neither.
    """
    checks: list[Check] = []
    head_ca = _fingerprint(found.get(plan.head.name))
    for node_plan in plan.nodes:
        answer = found.get(node_plan.name)
        if not isinstance(answer, NodeSecurity):
            continue
        if answer.env is None:
            continue  # not up here (preflight before rtk up): net.ports says so
        checks.append(_auth_check(plan, node_plan.name, answer.env))
        checks.append(_tls_check(plan, node_plan, answer, head_ca, now))
    return checks


def _fingerprint(answer: NodeSecurity | str | None) -> str | None:
    if not isinstance(answer, NodeSecurity) or answer.ca_pem is None:
        return None
    try:
        return cert_info(answer.ca_pem).fingerprint_sha256
    except TlsError:
        return None


def _auth_check(plan: ClusterPlan, node: str, env: Mapping[str, str]) -> Check:
    mode = env.get("RAY_AUTH_MODE", "disabled")
    want = "token" if plan.auth else "disabled"
    if mode != want:
        return Check("ray.auth", node, "fail", f"{mode} (inventory: {want})", want, RESTART_HINT)
    if mode == "token":
        return Check("ray.auth", node, "pass", "token", "token")
    return Check(
        "ray.auth",
        node,
        "warn",
        "disabled",
        "token",
        "anyone who reaches Ray's ports can run code here: ray.auth: token",
    )


def _tls_check(
    plan: ClusterPlan,
    node_plan: NodePlan,
    answer: NodeSecurity,
    head_ca: str | None,
    now: datetime.datetime,
) -> Check:
    name = node_plan.name
    env = answer.env or {}
    on = ray_tls_on(env)
    if on != plan.tls:
        measured = f"{'on' if on else 'off'} (inventory: {'on' if plan.tls else 'off'})"
        return Check("ray.tls", name, "fail", measured, "as the inventory", RESTART_HINT)
    if not on:
        return Check(
            "ray.tls",
            name,
            "warn",
            "off",
            "on",
            "Ray's gRPC, the token included, crosses the network in clear: ray.tls: true",
        )
    if answer.cert_pem is None or answer.ca_pem is None:
        return Check("ray.tls", name, "fail", "certificate or CA missing", "on", RESTART_HINT)
    try:
        verify_leaf(answer.ca_pem, answer.cert_pem, now)
        info = cert_info(answer.cert_pem)
        ca = cert_info(answer.ca_pem).fingerprint_sha256
    except TlsError as e:
        return Check("ray.tls", name, "fail", str(e), "a valid certificate", RESTART_HINT)
    if head_ca is not None and ca != head_ca:
        return Check("ray.tls", name, "fail", "its CA is not the head's", "one CA", RESTART_HINT)
    address = subject_names([node_plan.node.address])[0]
    if address not in info.names:
        return Check(
            "ray.tls",
            name,
            "fail",
            f"certificate does not name {address} ({', '.join(info.names)})",
            "names the node's address",
            RESTART_HINT,
        )
    until = f"on, certificate valid until {info.not_after:%Y-%m-%d}"
    if info.not_after - now < RENEW_BEFORE:
        return Check("ray.tls", name, "warn", until, "valid 14 days more", RESTART_HINT)
    return Check("ray.tls", name, "pass", until, "on")
