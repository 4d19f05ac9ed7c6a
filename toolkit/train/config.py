"""The trainer's options and the GPT model presets: plain data, no torch import."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from toolkit.errors import RtkError
from toolkit.json_types import JsonObject
from toolkit.power.settings import PowerSettings
from toolkit.stall.settings import WatchSettings
from toolkit.telemetry.options import TelemetryOptions

STRATEGIES = ("ddp", "fsdp2", "deepspeed")
PRECISIONS = ("fp32", "bf16", "fp16")
COMPILE_MODES = ("auto", "on", "off")
# inductor is torch.compile's own; aot_eager and eager trace without generating code,
# for telling a tracing problem from a code-generation one (and for quick CPU tests).
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
# --compile auto compiles runs of at least this many steps on CUDA. Compiling takes
# tens of seconds or more, once per attempt; a shorter run is a smoke test whose
# compile would outlast its training.
AUTO_COMPILE_MIN_STEPS = 50


@dataclass(frozen=True)
class ModelShape:
    """A GPT's size: layers, width, attention heads, context length, vocabulary."""

    layers: int
    width: int
    heads: int
    seq_len: int
    vocab_size: int

    @property
    def params(self) -> int:
        """Parameter count (tied embeddings, biases and norms included)."""
        d = self.width
        per_layer = 12 * d * d + 13 * d
        return self.layers * per_layer + (self.vocab_size + self.seq_len) * d + 2 * d

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6N for the weights plus attention (PaLM's estimate)."""
        return 6.0 * self.params + 12.0 * self.layers * self.width * self.seq_len


# GPT-2/GPT-3 shapes; "8B" is a GPT of that size (40 x 4096), not a Llama.
PRESETS: dict[str, ModelShape] = {
    "tiny": ModelShape(layers=2, width=64, heads=4, seq_len=64, vocab_size=256),
    "125M": ModelShape(layers=12, width=768, heads=12, seq_len=1024, vocab_size=50304),
    "350M": ModelShape(layers=24, width=1024, heads=16, seq_len=1024, vocab_size=50304),
    "1.3B": ModelShape(layers=24, width=2048, heads=16, seq_len=2048, vocab_size=50304),
    "8B": ModelShape(layers=40, width=4096, heads=32, seq_len=2048, vocab_size=50304),
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs; serialisable to JSON for the Ray job."""

    run_dir: str
    model_size: str = "tiny"
    layers: int | None = None
    width: int | None = None
    heads: int | None = None
    seq_len: int | None = None
    vocab_size: int | None = None
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    precision: str = "fp32"
    max_steps: int = 100
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 0
    num_workers: int = 0
    resources_per_worker: dict[str, float] = field(default_factory=dict)
    strategy: str = "ddp"
    zero_stage: int = 2
    offload_optimizer: bool = False
    gradient_checkpointing: bool = False
    # torch.compile: "on", "off", or "auto" (``compiles``): CUDA and a long enough run.
    compile: str = "auto"
    compile_backend: str = "inductor"
    bucket_cap_mb: float = 25.0
    save_steps: int = 0
    keep_checkpoints: int = 3
    resume: bool = False
    # On SIGINT (rtk stop, Ctrl-C, an sbatch job's teardown) finish the step, save a
    # checkpoint and end; with --save-steps it is on anyway (``stops_with_checkpoint``).
    checkpoint_on_stop: bool = False
    barrier_every: int = 0
    # A testing aid: "RANK:SECONDS" makes that rank sleep before every barrier, so the
    # report's straggler analysis can be seen to name it.
    straggle: str = ""
    max_failures: int = 0
    # How the driver's watchdog (toolkit.stall) watches the run: what to do on a stall,
    # and a fixed timeout (None: learned from the run's steps).
    stall: WatchSettings = field(default_factory=WatchSettings)
    # With --on-stall restart-excluding, the fewest nodes the run may go on with (the
    # inventory's min_nodes; 0: all of them): the worker group is elastic down to it.
    min_nodes: int = 0
    restart_wait_s: float = 600.0
    # How the driver's power policy (toolkit.power) sets the GPUs' limits as it goes.
    power: PowerSettings = field(default_factory=PowerSettings)
    seed: int = 0
    data: str | None = None
    telemetry: bool = True
    telemetry_sensors: str = "auto"
    telemetry_rate_hz: float = 10.0
    power_rate_hz: float = 0.0
    energy_rate_hz: float = 1.0  # GPU energy counter reads per second; 0: every full reading
    prometheus_port: int = 0
    # Idle power before the run, and after it a cooldown until power and temperature
    # settle (at most this long); 0 turns each off. They need telemetry.
    baseline_s: float = 0.0
    cooldown_max_s: float = 0.0

    log_every: int = 1

    def shape(self) -> ModelShape:
        """The model shape: the preset with any explicit layers/width/... applied."""
        if self.model_size not in PRESETS:
            raise RtkError(
                f"--model-size {self.model_size!r} is not a preset; choose one of "
                f"{', '.join(PRESETS)} (or override --layers/--width/--heads/--seq-len)"
            )
        base = PRESETS[self.model_size]
        overrides = {
            k: v
            for k, v in (
                ("layers", self.layers),
                ("width", self.width),
                ("heads", self.heads),
                ("seq_len", self.seq_len),
                ("vocab_size", self.vocab_size),
            )
            if v is not None
        }
        shape = dataclasses.replace(base, **overrides)
        if self.data is not None and shape.vocab_size < 256:
            shape = dataclasses.replace(shape, vocab_size=256)
        return shape

    def check(self) -> TrainConfig:
        """Raise ``RtkError`` naming the option for values that cannot work."""
        shape = self.shape()
        problems = []
        if self.strategy not in STRATEGIES:
            problems.append(f"--strategy {self.strategy!r}: choose {', '.join(STRATEGIES)}")
        if self.precision not in PRECISIONS:
            problems.append(f"--precision {self.precision!r}: choose {', '.join(PRECISIONS)}")
        if self.compile not in COMPILE_MODES:
            problems.append(f"--compile {self.compile!r}: choose {', '.join(COMPILE_MODES)}")
        if self.compile_backend not in COMPILE_BACKENDS:
            problems.append(
                f"--compile-backend {self.compile_backend!r}: choose {', '.join(COMPILE_BACKENDS)}"
            )
        if shape.width % shape.heads:
            problems.append(f"width {shape.width} is not a multiple of heads {shape.heads}")
        for name in (
            "batch_size",
            "gradient_accumulation_steps",
            "max_steps",
            "keep_checkpoints",
            "log_every",
        ):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("save_steps", "barrier_every", "max_failures", "num_workers"):
            if getattr(self, name) < 0:
                problems.append(f"--{name.replace('_', '-')} must be 0 or more")
        if self.straggle and self.straggler() is None:
            problems.append(
                f"--straggle {self.straggle!r}: give RANK:SECONDS, e.g. 1:0.5 "
                "(rank 1 sleeps 0.5 s before every barrier)"
            )
        if self.restart_wait_s <= 0:
            problems.append("--restart-wait-s must be more than 0")
        try:
            WatchSettings.from_json(self.stall.to_json())
        except ValueError as e:
            problems.append(str(e))
        problems += self.telemetry_options().problems()
        if (self.baseline_s or self.cooldown_max_s) and not self.telemetry:
            problems.append("--baseline-s and --cooldown-max-s need telemetry (not --no-telemetry)")

        if self.strategy == "deepspeed" and self.zero_stage not in (0, 1, 2, 3):
            problems.append(f"--zero-stage {self.zero_stage}: choose 0, 1, 2 or 3")
        if problems:
            raise RtkError("; ".join(problems))
        return self

    def compiles(self, device_type: str) -> bool:
        """Whether the model is compiled (``torch.compile``) on a ``device_type`` device.

        ``--compile on`` and ``off`` say so; ``auto`` compiles on CUDA when the run has
        at least ``AUTO_COMPILE_MIN_STEPS`` steps (``--max-steps``), and never on CPU,
        where compiling takes longer than the short runs made there train.
        """
        if self.compile == "auto":
            return device_type == "cuda" and self.max_steps >= AUTO_COMPILE_MIN_STEPS
        return self.compile == "on"

    @property
    def stops_with_checkpoint(self) -> bool:
        """Whether SIGINT ends the run at a step boundary with a checkpoint.

        Asked for with ``--checkpoint-on-stop``, and implied by ``--save-steps``: a run
        that keeps checkpoints keeps the last one too. Without, SIGINT aborts the
        workers at once (Ray Train's own handling) and nothing is saved.
        """
        return self.checkpoint_on_stop or self.save_steps > 0

    def straggler(self) -> tuple[int, float] | None:
        """The rank that sleeps before every barrier, and for how long (``--straggle``)."""
        rank, _, seconds = self.straggle.partition(":")
        try:
            parsed = int(rank), float(seconds)
        except ValueError:
            return None
        return parsed if parsed[0] >= 0 and parsed[1] >= 0 else None

    def telemetry_options(self) -> TelemetryOptions:
        """The run's telemetry options (the ``telemetry_*`` fields, idle phases)."""
        return TelemetryOptions(
            sensors=self.telemetry_sensors,
            rate_hz=self.telemetry_rate_hz,
            power_rate_hz=self.power_rate_hz,
            prometheus_port=self.prometheus_port,
            baseline_s=self.baseline_s,
            cooldown_max_s=self.cooldown_max_s,
            energy_rate_hz=self.energy_rate_hz,
        )

    def to_json(self) -> JsonObject:
        """A JSON-ready dict: the options, the settings objects as their own JSON."""
        data: JsonObject = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("stall", "power")
        }
        data["resources_per_worker"] = dict(self.resources_per_worker)
        data["stall"] = self.stall.to_json()
        data["power"] = self.power.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainConfig:
        """The inverse of ``to_json``.

        The settings' options may also come flat, as the command line and a sweep's
        ``train:`` spell them (``on_stall``, ``power_policy``...: ``SETTINGS_OPTIONS``).

        Raises:
            RtkError: An unknown key, or a setting its settings object refuses.
        """
        options = dict(data)
        nested: dict[str, JsonObject] = {
            name: dict(options.pop(name, None) or {}) for name in SETTINGS
        }
        for flat, (name, key) in SETTINGS_OPTIONS.items():
            if flat in options:
                nested[name][key] = options.pop(flat)
        unknown = sorted(set(options) - _PLAIN_FIELDS)
        if unknown:
            raise RtkError(f"unknown trainer option(s): {', '.join(unknown)}")
        try:
            stall = WatchSettings.from_json(nested["stall"])
            power = PowerSettings.from_json(nested["power"])
        except ValueError as e:
            raise RtkError(str(e)) from e
        return cls(**options, stall=stall, power=power)


# The settings objects a TrainConfig holds, and their options as the command line and a
# sweep's ``train:`` spell them, flat: option -> (field, the settings object's key).
SETTINGS: dict[str, type[WatchSettings] | type[PowerSettings]] = {
    "stall": WatchSettings,
    "power": PowerSettings,
}
SETTINGS_OPTIONS: dict[str, tuple[str, str]] = {
    "on_stall": ("stall", "policy"),
    "stall_timeout_s": ("stall", "timeout_s"),
    "stall_floor_s": ("stall", "floor_s"),
    "power_policy": ("power", "policy"),
    "max_slowdown": ("power", "max_slowdown"),
    "eta": ("power", "eta"),
}
_PLAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)} - set(SETTINGS)


def option_names() -> list[str]:
    """Every trainer option, flat, as the command line and a sweep's ``train:`` name them."""
    return [*sorted(_PLAIN_FIELDS | {"run_dir"}), *SETTINGS_OPTIONS]


def option_type(name: str) -> Any:
    """The type an option's value must have (``option_names``).

    Raises:
        KeyError: No such option.
    """
    if name in SETTINGS_OPTIONS:
        field_name, key = SETTINGS_OPTIONS[name]
        return get_type_hints(SETTINGS[field_name])[key]
    if name not in _PLAIN_FIELDS:
        raise KeyError(name)
    return get_type_hints(TrainConfig)[name]
