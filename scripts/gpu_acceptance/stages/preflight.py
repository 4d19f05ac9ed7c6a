"""Stage 6: preflight's GPU facts and checks on this node, against nvidia-smi and dcgmi.

The node script rtk runs on each node (``toolkit/node/facts.py`` fed to ``python -``)
and, when pydantic imports, preflight's own evaluation of them (``gpu_checks``), without
Ray (``rtk preflight --local --load`` through Ray is stage ray-preflight). The
facts are then compared field by field with ``nvidia-smi --query-gpu`` and, when
``dcgmi`` is there, with its GPU list.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import tempfile
from typing import Any

from gpu_acceptance import procs, smi
from gpu_acceptance.context import StageContext

# facts field -> (nvidia-smi field candidates, how to read its text, must agree)
COMPARED: dict[str, tuple[tuple[str, ...], str, bool]] = {
    "name": (("name",), "text", True),
    "persistence_mode": (("persistence_mode",), "enabled", True),
    "ecc_enabled": (("ecc.mode.current",), "enabled", True),
    "ecc_volatile_uncorrected": (("ecc.errors.uncorrected.volatile.total",), "number", True),
    "pcie_gen_max": (("pcie.link.gen.max", "pcie.link.gen.gpumax"), "number", True),
    "pcie_width_max": (("pcie.link.width.max",), "number", True),
    "pcie_gen": (("pcie.link.gen.current", "pcie.link.gen.gpucurrent"), "number", False),
    "pcie_width": (("pcie.link.width.current",), "number", False),
    "clocks_event_reasons": (
        ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
        "hex",
        False,
    ),
}


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    how = "toolkit/node/facts.py and gpu_checks"
    return f"run {how} and compare its GPU values with nvidia-smi and dcgmi (when present)"


def smi_value(text: Any, how: str) -> Any:
    """An nvidia-smi CSV value read the way its facts counterpart is."""
    if text is None:
        return None
    if how == "enabled":
        return str(text).strip().lower() == "enabled"
    if how == "number":
        return int(text) if isinstance(text, float) else None
    if how == "hex":
        try:
            return int(str(text), 16)
        except ValueError:
            return None
    return str(text)


def compare(
    facts: dict[str, Any], rows: list[dict[str, Any]], fields: dict[str, str]
) -> dict[str, Any]:
    """Per GPU (UUID) and field: rtk's value, nvidia-smi's, and whether they agree.

    ``fields`` maps each facts field to the nvidia-smi field this nvidia-smi has.
    Only ``must agree`` fields count as mismatches; the others (current PCIe link,
    clocks-event reasons) move with load and are shown side by side.
    """
    by_uuid = {str(r.get("uuid")): r for r in rows}
    devices = facts.get("devices") or {}
    result: dict[str, Any] = {
        "count": {
            "rtk": facts.get("count"),
            "nvidia_smi": len(rows),
            "match": facts.get("count") == len(rows),
        },
        "driver_version": {
            "rtk": facts.get("driver_version"),
            "nvidia_smi": rows[0].get("driver_version") if rows else None,
        },
        "gpus": {},
        "mismatches": [],
    }
    result["driver_version"]["match"] = (
        result["driver_version"]["rtk"] == result["driver_version"]["nvidia_smi"]
    )
    if not result["count"]["match"]:
        result["mismatches"].append(f"GPU count: rtk {facts.get('count')}, nvidia-smi {len(rows)}")
    if not result["driver_version"]["match"]:
        driver = result["driver_version"]
        result["mismatches"].append(
            f"driver: rtk {driver['rtk']}, nvidia-smi {driver['nvidia_smi']}"
        )
    for uuid, device in devices.items():
        row = by_uuid.get(uuid)
        if row is None:
            result["mismatches"].append(f"{uuid}: not listed by nvidia-smi")
            continue
        per: dict[str, Any] = {}
        for key, smi_field in fields.items():
            _, how, must = COMPARED[key]
            ours, theirs = device.get(key), smi_value(row.get(smi_field), how)
            if ours is None and theirs is None:
                continue
            agree = ours == theirs
            per[key] = {"rtk": ours, "nvidia_smi": theirs, "match": agree}
            if must and not agree and not (ours is None or theirs is None):
                result["mismatches"].append(f"{uuid} {key}: rtk {ours!r}, nvidia-smi {theirs!r}")
        result["gpus"][uuid] = per
    return result


def dcgmi_count(text: str) -> int | None:
    """The GPU count of ``dcgmi discovery -l`` ("1 GPU found." / "8 GPUs found.")."""
    match = re.search(r"(\d+)\s+GPUs?\s+found", text)
    return int(match.group(1)) if match else None


def node_facts(ctx: StageContext) -> dict[str, Any]:
    """This node's facts from rtk's node script, run as rtk runs it (``python - ARGS``)."""
    from toolkit.nodeinfo.script import sent_source

    with tempfile.TemporaryFile("w+", encoding="utf-8") as f:
        f.write(sent_source("toolkit.node", "facts.py"))
        f.seek(0)
        done = procs.run([ctx.python, "-", str(ctx.work_dir), ""], 60, stdin=f)
    if not done.ok:
        raise RuntimeError(f"facts.py failed: {done.why()}")
    facts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return facts


def evaluate(facts: dict[str, Any], expected: int) -> list[dict[str, Any]]:
    """Preflight's GPU checks of these facts (needs pydantic, like all of preflight)."""
    from toolkit.nodeinfo.gpu_facts import GpuFacts
    from toolkit.preflight.gpu_checks import gpu_checks

    node = socket.gethostname()
    checks = gpu_checks(node, GpuFacts.from_json(node, facts), expected)
    return [
        {"name": c.name, "status": c.status, "measured": c.measured, "threshold": c.threshold}
        for c in checks
    ]


# The per-node load test preflight's --load runs on every node, here on its own (no Ray).
NODE_LOAD = (
    "import json; from toolkit.preflight.load.node import run_node_load; "
    "print(json.dumps(run_node_load('bf16', 3.0).to_json()))"
)


def _node_load(ctx: StageContext, io: Any) -> None:
    """Preflight's load test on this node's GPUs: GEMM, copies, clocks, throttle reasons."""
    done = procs.run([ctx.python, "-c", NODE_LOAD], 60, env=ctx.env(), cwd=ctx.repo)
    if done.rc != 0:
        io.error(f"preflight's load test failed: {done.why()}")
        return
    load = json.loads(done.stdout.strip().splitlines()[-1])
    io.measure("node_load", load)
    for device in load.get("devices", []):
        if not device.get("gemm_tflops"):
            io.error(f"load test: no GEMM rate on {device.get('name', 'a device')}")


def run(ctx: StageContext, io: Any) -> None:
    """Collect the facts and checks; compare with the peers."""
    if not ctx.has("pynvml"):
        raise io.skip("pynvml (nvidia-ml-py) does not import: rtk's GPU facts need it")
    facts_all = node_facts(ctx)
    facts = facts_all.get("gpus") or {}
    io.measure("facts", facts)
    if not facts.get("available"):
        io.error(f"rtk's node script sees no GPU: {facts.get('reason')}")
        return
    if ctx.has("pydantic"):
        checks = evaluate(facts, len(ctx.gpus))
        io.measure("path", "facts.py + gpu_checks (no Ray)")
    else:
        checks = []
        io.measure("path", "facts.py only")
        io.measure(
            "findings",
            ["pydantic does not import: preflight's checks were not run, only its facts compared"],
        )
    io.measure("checks", checks)
    for check in checks:
        if check.get("status") == "fail":
            io.error(f"preflight check {check['name']} failed: {check.get('measured')}")
    if smi.available():
        known = smi.help_fields()
        fields = {k: f for k, (cands, _, _) in COMPARED.items() if (f := smi.pick(known, cands))}
        wanted = ["index", "uuid", "driver_version", *dict.fromkeys(fields.values())]
        rows = smi.query(wanted)
        comparison = compare(facts, rows, fields)
        io.measure("against_nvidia_smi", comparison)
        for mismatch in comparison["mismatches"]:
            io.error(f"rtk and nvidia-smi disagree: {mismatch}")
    else:
        io.error("nvidia-smi not found: nothing to compare with")
    if shutil.which("dcgmi"):
        done = procs.run(["dcgmi", "discovery", "-l"], 30)
        count = dcgmi_count(done.stdout)
        io.measure(
            "dcgmi", {"gpus": count, "rc": done.rc, "output_tail": procs.tail(done.stdout, 600)}
        )
        if count is not None and count != facts.get("count"):
            io.error(f"dcgmi lists {count} GPU(s), rtk {facts.get('count')}")
    else:
        io.measure("dcgmi", "not installed")
    if ctx.has("torch"):
        _node_load(ctx, io)
    statuses = [c.get("status") for c in checks]
    mismatches = io.result.measurements.get("against_nvidia_smi", {}).get("mismatches", [])
    io.summary(
        f"{len(checks)} GPU checks ({statuses.count('pass')} pass, {statuses.count('warn')} warn, "
        f"{statuses.count('fail')} fail); {len(mismatches)} mismatches with nvidia-smi"
    )
