"""The machine: its GPUs (NVML, else nvidia-smi), versions, and what imports.

``python -m gpu_acceptance.machine imports`` prints, as one JSON line, whether each
module of ``MODULES`` imports (with its version or the error); the runner calls it in
a separate process so that importing vLLM or DeepSpeed leaves the runner untouched.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from gpu_acceptance import procs, smi
from gpu_acceptance.context import GpuInfo

# What the stages may use; each is probed by a real import in GPU mode.
MODULES = (
    "torch",
    "pynvml",
    "numpy",
    "matplotlib",
    "pydantic",
    "pytest",
    "transformers",
    "ray",
    "deepspeed",
    "vllm",
    "zeus",
    "fabric",
    "paramiko",
    "hatchling",
)
# Installed distributions whose versions the record names.
DISTRIBUTIONS = ("torch", "nvidia-ml-py", "ray", "deepspeed", "vllm", "zeus", "transformers")


@dataclass(frozen=True)
class GpuProbe:
    """What was found about the GPUs.

    Attributes:
        gpus: The GPUs, in NVML order.
        driver_version: The driver's version.
        cuda_version: The CUDA version the driver supports.
        via: ``nvml`` or ``nvidia-smi`` (what listed them); None when none did.
        reason: Why no GPU was found (empty when some were).
    """

    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    via: str | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """Whether there is at least one GPU."""
        return bool(self.gpus)

    @property
    def model(self) -> str | None:
        """The first GPU's product name."""
        return self.gpus[0].name if self.gpus else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def probe_nvml() -> GpuProbe:
    """The GPUs NVML sees (never raises: a failure is the reason)."""
    try:
        import pynvml
    except ImportError as e:
        return GpuProbe(reason=f"pynvml does not import ({e})")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError, or OSError from a broken library
        return GpuProbe(reason=f"nvmlInit failed ({e})")
    try:
        gpus = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                GpuInfo(
                    index,
                    _text(pynvml.nvmlDeviceGetUUID(handle)),
                    _text(pynvml.nvmlDeviceGetName(handle)),
                )
            )
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception as e:  # noqa: BLE001 - any NVML failure means no usable GPU list
        return GpuProbe(reason=f"NVML failed listing GPUs ({e})")
    finally:
        with contextlib.suppress(Exception):  # nothing to do about a failed shutdown
            pynvml.nvmlShutdown()
    if not gpus:
        return GpuProbe(reason="NVML sees no GPU")
    return GpuProbe(tuple(gpus), driver, cuda_text, "nvml")


def probe_smi(timeout_s: float = 20.0) -> GpuProbe:
    """The GPUs nvidia-smi lists (never raises: a failure is the reason)."""
    if not smi.available():
        return GpuProbe(reason="nvidia-smi not found")
    done = procs.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,driver_version", "--format=csv,nounits"],
        timeout_s,
    )
    if not done.ok:
        return GpuProbe(reason=f"nvidia-smi failed: {done.why(200)}")
    rows, _ = smi.parse_csv(done.stdout)
    gpus = tuple(
        GpuInfo(int(r["index"]), str(r["uuid"]), str(r["name"]))
        for r in rows
        if isinstance(r.get("index"), float)
    )
    if not gpus:
        return GpuProbe(reason="nvidia-smi lists no GPU")
    banner = procs.run(["nvidia-smi"], timeout_s).stdout
    cuda = next(iter(_cuda_in_banner(banner)), None)
    driver = str(rows[0].get("driver_version") or "") or None
    return GpuProbe(gpus, driver, cuda, "nvidia-smi")


def _cuda_in_banner(text: str) -> list[str]:
    import re

    return re.findall(r"CUDA Version:\s*([0-9.]+)", text)


def probe_gpus() -> GpuProbe:
    """NVML first, then nvidia-smi; the reason names why each found nothing."""
    nvml = probe_nvml()
    if nvml.found:
        return nvml
    peer = probe_smi()
    if peer.found:
        return GpuProbe(
            peer.gpus,
            peer.driver_version,
            peer.cuda_version,
            peer.via,
            notes=[f"NVML: {nvml.reason}; GPUs listed by nvidia-smi"],
        )
    return GpuProbe(reason=f"{peer.reason}; {nvml.reason}")


def versions() -> dict[str, str | None]:
    """Installed versions of ``DISTRIBUTIONS`` (None: not installed), without importing."""
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def findable() -> dict[str, bool]:
    """Whether each of ``MODULES`` is on the path (no import: fast, for CPU mode)."""
    return {name: importlib.util.find_spec(name) is not None for name in MODULES}


def probe_imports(python: str, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Import each of ``MODULES`` in ``python`` (one process): per module ok/version/error."""
    done = procs.run([python, "-m", "gpu_acceptance.machine", "imports"], timeout_s, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": done.why()}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _import_one(name: str) -> dict[str, Any]:
    try:
        module = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any failure to import is the answer
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    return {"ok": True, "version": str(getattr(module, "__version__", ""))}


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    facts: dict[str, Any] = {
        "version": str(torch.__version__),
        "cuda_build": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }
    if facts["cuda_available"]:
        facts["device_count"] = torch.cuda.device_count()
        facts["device_name"] = torch.cuda.get_device_name(0)
        facts["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
        try:
            nccl = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            facts["nccl_version"] = (
                ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
            )
        except Exception as e:  # noqa: BLE001 - a build without NCCL
            facts["nccl_version"] = f"unknown ({e})"
    return facts


def main(argv: list[str]) -> int:
    """``imports``: one JSON line, module -> {ok, version|error}, plus ``torch`` facts."""
    if argv != ["imports"]:
        print("usage: python -m gpu_acceptance.machine imports", file=sys.stderr)
        return 2
    result: dict[str, Any] = {name: _import_one(name) for name in MODULES if name != "torch"}
    result["torch"] = _torch_facts()
    result["torch"]["ok"] = "error" not in result["torch"]
    sys.stdout.flush()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
