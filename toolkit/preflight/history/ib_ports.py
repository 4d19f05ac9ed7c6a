"""InfiniBand and RoCE ports from sysfs, checked against the interconnect expected.

``toolkit.node.common.read_port_files`` walks ``<root>/sys/class/infiniband/<hca>/ports/<n>/``
on the node (preflight's ``facts.py``) and sends the raw text of ``state``,
``phys_state``, ``rate``, ``link_layer`` and the error counters (``COUNTER_MAX``).
``parse_ports`` reads that text on the host and ``port_checks`` grades each port.
The formats are the kernel's (``drivers/infiniband/core/sysfs.c``): ``state``
``4: ACTIVE``, ``phys_state`` ``5: LinkUp``, ``rate`` ``400 Gb/sec (4X NDR)``,
``link_layer`` ``InfiniBand`` or ``Ethernet``, counters decimal integers that stop
at their width's maximum (``COUNTER_MAX``) and count since they were last cleared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toolkit.node.common import IB_COUNTER_MAX as COUNTER_MAX
from toolkit.preflight.hardware_table import InterconnectSpec
from toolkit.rundir.preflight import Check, Status

DOWN_UNUSED = ("Disabled", "Polling", "Sleep")  # what an uncabled or disabled port shows


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device as sysfs shows it; None: not read.

    Attributes:
        hca: The device (``mlx5_0``).
        port: The port number (from 1).
        state: The logical state (``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED``).
        phys_state: The physical state (``LinkUp``, ``Polling``, ``Disabled``...).
        link_layer: ``InfiniBand`` or ``Ethernet`` (RoCE).
        rate: The rate as written (``400 Gb/sec (4X NDR)``).
        rate_gbit_s: Its number.
        counters: Error counters read, by name.
    """

    hca: str
    port: int
    state: str | None = None
    phys_state: str | None = None
    link_layer: str | None = None
    rate: str | None = None
    rate_gbit_s: float | None = None
    counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``mlx5_0:1``, the form NCCL_IB_HCA takes."""
        return f"{self.hca}:{self.port}"


def parse_ports(files: Mapping[str, str]) -> list[IbPort]:
    """The ports in ``read_port_files``' answer (``facts.py``'s), by device then port number.

    Keys that are not ``<hca>/<port>/<file>`` with a numeric port are ignored, and
    so are values that do not parse (a counter that is not a number).
    """
    grouped: dict[tuple[str, int], dict[str, str]] = {}
    for key, value in files.items():
        parts = key.split("/", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        grouped.setdefault((parts[0], int(parts[1])), {})[parts[2]] = value
    ports = []
    for (hca, number), values in sorted(grouped.items()):
        rate = values.get("rate")
        match = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", rate or "")
        counters = {
            name[len("counters/") :]: int(text)
            for name, text in values.items()
            if name.startswith("counters/") and text.strip().isdigit()
        }
        ports.append(
            IbPort(
                hca=hca,
                port=number,
                state=_after_colon(values.get("state")),
                phys_state=_after_colon(values.get("phys_state")),
                link_layer=(values.get("link_layer") or "").strip() or None,
                rate=(rate or "").strip() or None,
                rate_gbit_s=float(match.group(1)) if match else None,
                counters=counters,
            )
        )
    return ports


def _after_colon(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE`` (a bare ``ACTIVE`` stays as it is)."""
    if not text or not text.strip():
        return None
    return text.split(":", 1)[-1].strip() or None


@dataclass(frozen=True)
class PortExpectation:
    """What the node's fabric ports should show.

    Attributes:
        label: What is expected, for messages (``ib-ndr``).
        link_layer: Only ports of this link layer are the fabric's; None: every port.
        rate_gbit_s: The port rate each should run at; None: any.
        hcas: The ports in use (``mlx5_0`` or ``mlx5_0:1``); named ports must be up.
            Empty: every port of the link layer, where a port that is down and
            looks unused (not cabled, or disabled) only warns.
        min_ports: How many ACTIVE ports the node needs; None: no count.
        counter_limits: Warn when an error counter is above its limit.
    """

    label: str = ""
    link_layer: str | None = None
    rate_gbit_s: float | None = None
    hcas: tuple[str, ...] = ()
    min_ports: int | None = None
    counter_limits: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_MAX, 0))

    @classmethod
    def from_spec(
        cls, spec: InterconnectSpec, hcas: Sequence[str] = (), min_ports: int | None = None
    ) -> PortExpectation:
        """The expectation for an interconnect of the hardware table."""
        return cls(
            label=spec.key,
            link_layer=spec.link_layer,
            rate_gbit_s=spec.rate_gbit_s.value if spec.rate_gbit_s else None,
            hcas=tuple(hcas),
            min_ports=min_ports,
        )


def port_checks(node: str, ports: Sequence[IbPort], expect: PortExpectation) -> list[Check]:
    """One ``net.ib_port`` check per fabric port, and a ``net.ib_ports`` count.

    The count is there when the node has no fabric port, lacks a named one, or when
    ``min_ports`` is set.
    """
    named = set(expect.hcas)
    if named:
        chosen = [p for p in ports if p.hca in named or p.name in named]
    else:
        layer = (expect.link_layer or "").casefold()
        chosen = [p for p in ports if not layer or (p.link_layer or "").casefold() == layer]
    checks = [_port_check(node, p, expect, explicit=bool(named)) for p in chosen]
    missing = sorted(n for n in named if not any(n in (p.hca, p.name) for p in ports))
    active = sum((p.state or "").upper() == "ACTIVE" for p in chosen)
    what = f"{expect.link_layer or 'RDMA'} port(s)" + (f" ({expect.label})" if expect.label else "")
    problems = []
    if missing:
        problems.append(f"no such port: {', '.join(missing)}")
    if not chosen:
        problems.append(f"no {what} found")
    elif expect.min_ports is not None and active < expect.min_ports:
        problems.append(f"{active} of {expect.min_ports} {what} ACTIVE")
    if problems or expect.min_ports is not None:
        checks.append(
            Check(
                "net.ib_ports",
                node,
                "fail" if problems else "pass",
                "; ".join(problems) or f"{active} {what} ACTIVE",
                f">= {expect.min_ports or 1} ACTIVE {what}",
                "the node lacks fabric ports: check that the RDMA driver is loaded "
                "(ls /sys/class/infiniband), ibstat, and the inventory's HCA names",
            )
        )
    return checks


def _port_check(node: str, port: IbPort, expect: PortExpectation, explicit: bool) -> Check:
    status: Status = "pass"
    hint = ""
    up = (port.state or "").upper() == "ACTIVE" and port.phys_state == "LinkUp"
    if not up:
        unused = (port.state or "").upper() == "DOWN" and port.phys_state in DOWN_UNUSED
        status = "warn" if unused and not explicit else "fail"
        hint = (
            "the port is not up: check the cable and transceiver, the switch port, and for "
            "InfiniBand that a subnet manager runs (state INIT or ARMED means none "
            "configured it); a port rtk should ignore can be left out by naming the HCAs "
            "in use"
        )
    elif (
        expect.rate_gbit_s is not None
        and port.rate_gbit_s is not None
        and port.rate_gbit_s < expect.rate_gbit_s
    ):
        status = "fail"
        hint = (
            "the link trained below its rate (fewer lanes or a lower speed): reseat or "
            "replace the cable or transceiver, or check the switch port's configuration"
        )
    over = {
        name: value
        for name, value in sorted(port.counters.items())
        if name in expect.counter_limits and value > expect.counter_limits[name]
    }
    if over and status == "pass":
        status = "warn"
        hint = (
            "the link has logged errors since its counters were last cleared: watch them "
            "(perfquery, or the sysfs counters) under load; errors that keep growing mean "
            "a bad cable, transceiver or port"
        )
    parts = [port.name, port.link_layer or "?", port.state or "?", port.phys_state or "?"]
    measured = " ".join(parts) + (f" {port.rate}" if port.rate else "")
    if over:
        measured += "; " + ", ".join(
            f"{name} {value}" + (" (saturated)" if value >= COUNTER_MAX.get(name, 1 << 64) else "")
            for name, value in over.items()
        )
    rate = f", >= {expect.rate_gbit_s:g} Gb/s" if expect.rate_gbit_s is not None else ""
    return Check(
        "net.ib_port",
        node,
        status,
        measured,
        f"ACTIVE, LinkUp{rate}, error counters within limits",
        hint,
    )
