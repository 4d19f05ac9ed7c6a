"""A short load test of the node it runs on: GEMM, host<->device copies, device memory.

``run_node_load`` runs where the node's work runs (a Ray task pinned to the node): it
multiplies matrices on every GPU at once for about ``duration_s`` while a thread reads
each GPU's SM clock, power and clocks-event (throttle) reasons from NVML every
``SAMPLE_INTERVAL_S``; then it times pinned host->device and device->host copies and
a device-to-device copy, one GPU at a time. On a node without CUDA the same shape
runs on the CPU: one fp32 GEMM and a memory copy, with no host<->device copies.

torch and pynvml are imported inside the functions that need them, so this module
imports on the host without either. Grading is ``toolkit.preflight.load.device_checks``.
"""

from __future__ import annotations

import importlib
import logging
import platform
import socket
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import PreflightError
from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import record_fields

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
CPU_PRECISION = "fp32"
GPU_GEMM_SIZE = 8192
CPU_GEMM_SIZE = 1024
HOST_COPY_BYTES = 256 * 1024**2
GPU_COPY_BYTES = 1024**3
CPU_COPY_BYTES = 256 * 1024**2
COPY_REPEATS = 5
SAMPLE_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Spread:
    """The smallest, middle and largest of some samples."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        """The spread of ``values``; None when there are none."""
        if not values:
            return None
        return cls(min(values), statistics.median(values), max(values))

    def to_json(self) -> JsonObject:
        """The spread as written."""
        return {"min": self.min, "median": self.median, "max": self.max}

    @classmethod
    def from_fields(cls, f: Fields | None) -> Spread | None:
        """The inverse of ``to_json``; None for a missing or null object."""
        if f is None:
            return None
        return cls(f.number("min"), f.number("median"), f.number("max"))


@dataclass(frozen=True)
class DeviceLoad:
    """What one device did under load.

    Attributes:
        device: ``cuda:0``... or ``cpu``.
        model: The GPU's name (``NVIDIA H100 80GB HBM3``) or the CPU's model and the
            threads torch used; devices of one model are compared with each other.
        precision: The GEMM's precision (``fp32`` on a CPU whatever was asked).
        gemm_tflops: The GEMM's throughput, TFLOP/s.
        memory_gb_s: A device-memory copy, bytes read plus written per second, GB/s.
        h2d_gb_s: A pinned host->device copy, GB/s; None when skipped.
        d2h_gb_s: A device->pinned host copy, GB/s; None when skipped.
        host_copy_skipped: Why there are no host<->device figures ("" when there are).
        samples: NVML samples taken during the GEMM (0: none taken).
        sm_clock_mhz: The SM clock during the GEMM.
        power_w: The power draw during the GEMM.
        clocks_events: Clocks-event reason bit -> samples it was set in.
    """

    device: str
    model: str
    precision: str
    gemm_tflops: float
    memory_gb_s: float
    h2d_gb_s: float | None = None
    d2h_gb_s: float | None = None
    host_copy_skipped: str = ""
    samples: int = 0
    sm_clock_mhz: Spread | None = None
    power_w: Spread | None = None
    clocks_events: Mapping[int, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The device's figures as written (reason bits as ``0x80``)."""
        return {
            "device": self.device,
            "model": self.model,
            "precision": self.precision,
            "gemm_tflops": self.gemm_tflops,
            "memory_gb_s": self.memory_gb_s,
            "h2d_gb_s": self.h2d_gb_s,
            "d2h_gb_s": self.d2h_gb_s,
            "host_copy_skipped": self.host_copy_skipped,
            "samples": self.samples,
            "sm_clock_mhz": self.sm_clock_mhz.to_json() if self.sm_clock_mhz else None,
            "power_w": self.power_w.to_json() if self.power_w else None,
            "clocks_events": {f"0x{bit:x}": n for bit, n in sorted(self.clocks_events.items())},
        }

    @classmethod
    def from_fields(cls, f: Fields) -> DeviceLoad:
        """The inverse of ``to_json``."""
        events = f.obj_or_none("clocks_events") or {}
        try:
            clocks_events = {int(bit, 16): int(str(n)) for bit, n in events.items()}
        except (TypeError, ValueError) as e:
            raise f.fail("clocks_events", "an object of 0xBIT: count") from e
        return cls(
            device=f.text("device"),
            model=f.text("model"),
            precision=f.text("precision"),
            gemm_tflops=f.number("gemm_tflops"),
            memory_gb_s=f.number("memory_gb_s"),
            h2d_gb_s=f.number_or_none("h2d_gb_s"),
            d2h_gb_s=f.number_or_none("d2h_gb_s"),
            host_copy_skipped=f.text_or_none("host_copy_skipped") or "",
            samples=f.integer_or_none("samples") or 0,
            sm_clock_mhz=Spread.from_fields(f.nested_or_none("sm_clock_mhz")),
            power_w=Spread.from_fields(f.nested_or_none("power_w")),
            clocks_events=clocks_events,
        )


@dataclass(frozen=True)
class NodeLoad:
    """One node's load test.

    Attributes:
        hostname: Where it ran.
        precision: The precision asked for.
        duration_s: How long each GEMM was asked to run.
        gemm_size: The GEMM's matrices are ``gemm_size x gemm_size``.
        devices: Every device's figures (one ``cpu`` entry on a node without CUDA).
        sampling_skipped: Why NVML was not read during the load ("" when it was).
    """

    hostname: str
    precision: str
    duration_s: float
    gemm_size: int
    devices: tuple[DeviceLoad, ...]
    sampling_skipped: str = ""

    def to_json(self) -> JsonObject:
        """The node's test as written."""
        return {
            "hostname": self.hostname,
            "precision": self.precision,
            "duration_s": self.duration_s,
            "gemm_size": self.gemm_size,
            "devices": [d.to_json() for d in self.devices],
            "sampling_skipped": self.sampling_skipped,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "node load") -> NodeLoad:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        devices = f.data.get("devices")
        if not isinstance(devices, list):
            raise f.fail("devices", "a list")
        return cls(
            hostname=f.text("hostname"),
            precision=f.text("precision"),
            duration_s=f.number("duration_s"),
            gemm_size=f.integer("gemm_size"),
            devices=tuple(
                DeviceLoad.from_fields(record_fields(d, f"{where}: devices[{i}]"))
                for i, d in enumerate(devices)
            ),
            sampling_skipped=f.text_or_none("sampling_skipped") or "",
        )


class NvmlSampler:
    """Reads SM clock, power and clocks-event reasons of some GPUs on a thread.

    Use as a context manager around the load: sampling starts on entry and stops on
    exit. A reading NVML refuses is left out; the others of that sample still count.

    Args:
        nvml: The ``pynvml`` module, or an object shaped like it.
        handles: One NVML device handle per GPU, in the order of the results.
        interval_s: Time between samples.
    """

    def __init__(self, nvml: Any, handles: Sequence[Any], interval_s: float = SAMPLE_INTERVAL_S):
        self._nvml = nvml
        self._handles = list(handles)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._clock_mhz: list[list[float]] = [[] for _ in self._handles]
        self._power_w: list[list[float]] = [[] for _ in self._handles]
        self._samples = [0] * len(self._handles)
        self._events: list[dict[int, int]] = [{} for _ in self._handles]

    def __enter__(self) -> NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            for i, handle in enumerate(self._handles):
                self._sample(i, handle)

    def _sample(self, i: int, handle: Any) -> None:
        nvml = self._nvml
        self._samples[i] += 1
        with suppress(nvml.NVMLError):
            self._clock_mhz[i].append(
                float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
            )
        with suppress(nvml.NVMLError):
            self._power_w[i].append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        try:
            mask = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except nvml.NVMLError:
            return
        for bit in (1 << b for b in range(mask.bit_length()) if mask >> b & 1):
            self._events[i][bit] = self._events[i].get(bit, 0) + 1

    def results(self, i: int) -> tuple[int, Spread | None, Spread | None, dict[int, int]]:
        """GPU ``i``'s samples, SM clock, power and reason-bit counts."""
        return (
            self._samples[i],
            Spread.of(self._clock_mhz[i]),
            Spread.of(self._power_w[i]),
            dict(self._events[i]),
        )


def run_node_load(precision: str, duration_s: float = 2.0, size: int | None = None) -> NodeLoad:
    """Load this node's devices briefly and measure them.

    Args:
        precision: The GEMM's precision on GPUs, one of ``PRECISIONS``; CPUs use fp32.
        duration_s: How long the GEMM runs (all GPUs at once).
        size: The GEMM's matrix size; None: ``GPU_GEMM_SIZE`` or ``CPU_GEMM_SIZE``.

    Raises:
        PreflightError: An unknown precision, or torch does not import.
    """
    if precision not in PRECISIONS:
        raise PreflightError(
            f"node load: precision {precision!r} is not one of {', '.join(PRECISIONS)}"
        )
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise PreflightError(f"node load: torch does not import: {e}") from e
    cuda = bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)
    gemm_size = size or (GPU_GEMM_SIZE if cuda else CPU_GEMM_SIZE)
    if cuda:
        devices, skipped = _gpu_load(torch, precision, duration_s, gemm_size)
    else:
        devices, skipped = _cpu_load(torch, duration_s, gemm_size), "no GPU"
    return NodeLoad(
        hostname=socket.gethostname(),
        precision=precision,
        duration_s=duration_s,
        gemm_size=gemm_size,
        devices=tuple(devices),
        sampling_skipped=skipped,
    )


def _cpu_load(torch: Any, duration_s: float, size: int) -> list[DeviceLoad]:
    tflops = gemm_tflops(torch, torch.device("cpu"), torch.float32, size, duration_s)
    src = torch.ones(CPU_COPY_BYTES, dtype=torch.uint8)
    dst = torch.empty_like(src)
    memory = _copy_gb_s(lambda: dst.copy_(src), 2 * CPU_COPY_BYTES, lambda: None)
    return [
        DeviceLoad(
            device="cpu",
            model=f"{_cpu_model()} ({torch.get_num_threads()} threads)",
            precision=CPU_PRECISION,
            gemm_tflops=tflops,
            memory_gb_s=memory,
            host_copy_skipped="no GPU: host and device memory are one",
        )
    ]


def _gpu_load(
    torch: Any, precision: str, duration_s: float, size: int
) -> tuple[list[DeviceLoad], str]:
    count = torch.cuda.device_count()
    gpus = [torch.device("cuda", i) for i in range(count)]
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}.get(
        precision, torch.float16
    )
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    nvml, handles, skipped = _open_nvml(torch, count)
    try:
        sampler = NvmlSampler(nvml, handles) if nvml is not None else None
        with ThreadPoolExecutor(max_workers=count) as pool, ExitStack() as stack:
            if sampler is not None:
                stack.enter_context(sampler)
            futures = [pool.submit(gemm_tflops, torch, g, dtype, size, duration_s) for g in gpus]
            tflops = [f.result() for f in futures]
        devices = []
        for i, gpu in enumerate(gpus):
            samples, clock, power, events = sampler.results(i) if sampler else (0, None, None, {})
            h2d, d2h, memory = _gpu_copies(torch, gpu)
            devices.append(
                DeviceLoad(
                    device=str(gpu),
                    model=torch.cuda.get_device_name(i),
                    precision=precision,
                    gemm_tflops=tflops[i],
                    memory_gb_s=memory,
                    h2d_gb_s=h2d,
                    d2h_gb_s=d2h,
                    samples=samples,
                    sm_clock_mhz=clock,
                    power_w=power,
                    clocks_events=events,
                )
            )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        if nvml is not None:
            with suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
    return devices, skipped


def _open_nvml(torch: Any, count: int) -> tuple[Any, list[Any], str]:
    """pynvml, initialised, and a handle per CUDA device; or None and why not."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as e:
        return None, [], f"pynvml (nvidia-ml-py) does not import: {e}"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return None, [], f"NVML does not start: {e}"
    handles = []
    try:
        for i in range(count):
            uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
            if uuid is not None:  # CUDA_VISIBLE_DEVICES may renumber the GPUs
                handles.append(nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}"))
            else:
                handles.append(nvml.nvmlDeviceGetHandleByIndex(i))
    except nvml.NVMLError as e:
        nvml.nvmlShutdown()
        return None, [], f"NVML has no handle for a CUDA device: {e}"
    return nvml, handles, ""


def gemm_tflops(torch: Any, device: Any, dtype: Any, size: int, duration_s: float) -> float:
    """TFLOP/s of ``size``-square matrix products on ``device`` for about ``duration_s``."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    c = torch.matmul(a, b)  # warm-up: kernels chosen, memory allocated
    sync = _sync(torch, device)
    sync()
    done, batch = 0, 1
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            torch.matmul(a, b, out=c)
        sync()
        done += batch
        elapsed = time.perf_counter() - start
        left_s = duration_s - elapsed
        if left_s <= 0:
            break
        each_s = elapsed / done  # batches of about a tenth of the run, never past its end
        batch = max(1, min(int(duration_s / 10 / each_s), int(left_s / each_s) + 1))
    return 2.0 * size**3 * done / elapsed / 1e12


def _gpu_copies(torch: Any, gpu: Any) -> tuple[float, float, float]:
    """Host->device, device->host and device-memory GB/s of one GPU."""
    sync = _sync(torch, gpu)
    host = torch.empty(HOST_COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(HOST_COPY_BYTES, dtype=torch.uint8, device=gpu)
    h2d = _copy_gb_s(lambda: device.copy_(host, non_blocking=True), HOST_COPY_BYTES, sync)
    d2h = _copy_gb_s(lambda: host.copy_(device, non_blocking=True), HOST_COPY_BYTES, sync)
    src = torch.ones(GPU_COPY_BYTES, dtype=torch.uint8, device=gpu)
    dst = torch.empty_like(src)
    memory = _copy_gb_s(lambda: dst.copy_(src), 2 * GPU_COPY_BYTES, sync)
    return h2d, d2h, memory


def _copy_gb_s(copy: Callable[[], object], size_bytes: int, sync: Callable[[], None]) -> float:
    """GB/s of ``copy`` moving ``size_bytes``: the median of ``COPY_REPEATS`` after a warm-up."""
    copy()
    sync()
    times_s = []
    for _ in range(COPY_REPEATS):
        start = time.perf_counter()
        copy()
        sync()
        times_s.append(time.perf_counter() - start)
    return size_bytes / statistics.median(times_s) / 1e9


def _sync(torch: Any, device: Any) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
