"""The vLLM workload of ``rtk profile``: generation throughput, as steps in the markers.

``python -m toolkit.profile.vllm_bench SETTINGS_JSON`` loads a local model with vLLM,
builds synthetic prompts of exactly ``input_len`` random token ids (fixed seed), runs
one warm-up generate and then ``repeats`` timed generates of ``batch_size`` prompts,
each asked for exactly ``output_len`` tokens (``ignore_eos``, greedy).

Each timed generate is one step in the trainer's marker format
(``markers/rank-00000.jsonl``): ``step_begin``, then ``step_end`` with ``tokens`` = the
tokens generated in that step, between one ``run_start`` and one ``run_end``. The
report therefore turns them into tokens/s and energy per token exactly as for
training; its window is the timed steps only (model loading and warm-up lie before
``run_start``). ``vllm.json`` in the run directory keeps the settings, every step's
time and tokens, and the vLLM version.

Settings: the ``VllmSpec`` fields (``model`` must be an existing local directory:
nothing is downloaded), ``repeats`` (default 3), ``seed`` (default 0) and ``run_dir``
(default: ``$RTK_RUN_DIR``, which ``rtk telemetry record`` sets). Cluster axes a sweep
passes along (``nodes``, ``power_limit_w``, clocks) are accepted and ignored.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, ValidationError

from toolkit.errors import RtkError
from toolkit.json_types import JsonObject, JsonValue
from toolkit.profile.experiment import CLUSTER_AXES, VllmSpec
from toolkit.rundir import MarkerWriter, RunDir

log = logging.getLogger(__name__)

NO_VLLM = (
    "the vllm workload needs the vllm extra on the nodes: pip install 'rtk[vllm]' (GPU nodes only)"
)
SUMMARY_FILE = "vllm.json"

# Token ids of a batch of prompts; the model's stand-in returns tokens generated per prompt.
Prompts = list[list[int]]
Generate = Callable[[Prompts], list[int]]
Echo = Callable[[str], None]


class BenchError(RtkError):
    """The settings are wrong, or vLLM or a GPU is missing: nothing was measured."""

    exit_code = 2


class BenchSettings(VllmSpec):
    """Everything one run of the workload needs."""

    repeats: int = Field(3, ge=1, le=1000, description="Timed generates (steps).")
    seed: int = Field(0, ge=0, description="Seed of the synthetic prompts and of vLLM.")
    run_dir: str | None = Field(None, description="Default: $RTK_RUN_DIR.")

    @property
    def tokens_per_step(self) -> int:
        """Output tokens every step should generate."""
        return self.batch_size * self.output_len


@dataclass(frozen=True)
class StepResult:
    """One timed generate, timed by its own markers (monotonic clock)."""

    step: int
    duration_s: float
    input_tokens: int
    output_tokens: int

    @property
    def tokens_per_s(self) -> float:
        """Output tokens over the step's time."""
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> JsonObject:
        """The step as ``vllm.json`` lists it, with its tokens per second."""
        return {
            "step": self.step,
            "duration_s": self.duration_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tokens_per_s": self.tokens_per_s,
        }


@dataclass(frozen=True)
class BenchSummary:
    """What one run of the workload measured, as ``vllm.json`` keeps it.

    Attributes:
        settings: The settings it ran with.
        run_dir: Its run directory.
        versions: vLLM's and torch's versions.
        vocab_size: The model's vocabulary size (the prompts' ids lie below it).
        warmup_s: The untimed warm-up generate.
        steps: The timed generates.
        short_steps: The steps that generated fewer tokens than asked.
    """

    settings: BenchSettings
    run_dir: Path
    versions: Mapping[str, str]
    vocab_size: int
    warmup_s: float
    steps: tuple[StepResult, ...]
    short_steps: tuple[int, ...]

    @property
    def duration_s(self) -> float:
        """The timed steps' time."""
        return sum(s.duration_s for s in self.steps)

    @property
    def output_tokens(self) -> int:
        """Tokens the timed steps generated."""
        return sum(s.output_tokens for s in self.steps)

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens over the timed steps' time; None without time."""
        total_s = self.duration_s
        return self.output_tokens / total_s if total_s > 0 else None

    def to_json(self) -> JsonObject:
        """``vllm.json``'s content."""
        return {
            "v": 1,
            "settings": self.settings.model_dump(),
            "run_dir": str(self.run_dir),
            "versions": dict[str, JsonValue](self.versions),
            "vocab_size": self.vocab_size,
            "warmup_s": self.warmup_s,
            "steps": [s.to_json() for s in self.steps],
            "duration_s": self.duration_s,
            "output_tokens": self.output_tokens,
            "tokens_per_s": self.tokens_per_s,
            "short_steps": list[JsonValue](self.short_steps),
        }


def parse_settings(text: str, env: Mapping[str, str]) -> tuple[BenchSettings, Path, Path]:
    """Check the settings JSON; returns them, the model directory and the run directory.

    Raises:
        BenchError: Every problem, one per line, naming the key and the value given.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BenchError(f"settings: not valid JSON ({e}): {text[:200]!r}") from e
    if not isinstance(raw, dict):
        raise BenchError(f"settings: expected a JSON object, got {text[:200]!r}")
    fields = list(BenchSettings.model_fields)
    problems = [
        f"settings.{key}: not a setting (valid: {', '.join(fields)})"
        for key in raw
        if key not in fields and key not in CLUSTER_AXES
    ]
    given = {k: v for k, v in raw.items() if k in fields}
    settings: BenchSettings | None = None
    try:
        settings = BenchSettings.model_validate(given)
    except ValidationError as e:
        for error in e.errors():
            where = ".".join(str(part) for part in error["loc"])
            value = f", got {error['input']!r}" if error["type"] != "missing" else ""
            problems.append(f"settings.{where}: {error['msg']}{value}")
    name = given.get("model")
    model = Path(name).expanduser() if isinstance(name, str) else None
    if model is not None and not model.is_dir():
        why = "does not exist" if not model.exists() else "is not a directory"
        problems.append(
            f"settings.model: {name!r} {why}; give a local model directory (nothing is downloaded)"
        )
    run_dir = given.get("run_dir") or env.get("RTK_RUN_DIR")
    if not run_dir:
        problems.append("settings.run_dir: not given, and RTK_RUN_DIR is not set")
    if problems or settings is None or model is None or not run_dir:
        raise BenchError("\n".join(problems))
    return settings, model.resolve(), Path(str(run_dir)).expanduser()


def require_gpus(visible: int, needed: int) -> None:
    """Refuse to start when fewer CUDA GPUs are visible than tensor parallelism needs.

    Raises:
        BenchError: ``visible < needed``.
    """
    if visible < needed:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        raise BenchError(
            f"the vllm workload needs {needed} CUDA GPU(s) (tensor_parallel_size) and torch "
            f"sees {visible} here (CUDA_VISIBLE_DEVICES={shown}); run it on GPU nodes"
        )


def synthetic_prompts(
    count: int, input_len: int, vocab_size: int, seed: int, skip_ids: Collection[int] = ()
) -> Prompts:
    """``count`` prompts of exactly ``input_len`` random token ids, the same for a seed.

    Ids are drawn from ``[0, vocab_size)`` without ``skip_ids`` (special tokens).

    Raises:
        BenchError: No id is left to draw from.
    """
    skip = set(skip_ids)
    pool = [i for i in range(vocab_size) if i not in skip]
    if not pool:
        raise BenchError(f"no token ids to draw prompts from (vocabulary of {vocab_size})")
    rng = random.Random(seed)
    return [rng.choices(pool, k=input_len) for _ in range(count)]


def timed_steps(
    generate: Generate, batches: Sequence[Prompts], markers: MarkerWriter, echo: Echo
) -> list[StepResult]:
    """Run ``generate`` on each batch as one step, between ``run_start`` and ``run_end``.

    Each step's time is the difference of its ``step_begin`` and ``step_end`` records,
    so the figures here are the ones the report sees.
    """
    results: list[StepResult] = []
    markers.write("run_start", 0, workload="vllm", resumed=False)
    for step, prompts in enumerate(batches, start=1):
        begin = markers.write("step_begin", step)
        generated = generate(prompts)
        output_tokens = int(sum(generated))
        input_tokens = sum(len(p) for p in prompts)
        end = markers.write("step_end", step, tokens=output_tokens, input_tokens=input_tokens)
        result = StepResult(step, end.mono_s - begin.mono_s, input_tokens, output_tokens)
        results.append(result)
        echo(
            f"vllm step {step}/{len(batches)}: {output_tokens} tokens in "
            f"{result.duration_s:.2f} s, {result.tokens_per_s:.0f} tokens/s"
        )
    markers.write("run_end", len(batches))
    return results


def run_bench(
    settings: BenchSettings,
    run_dir: Path,
    generate: Generate,
    vocab_size: int,
    skip_ids: Collection[int],
    versions: Mapping[str, str],
    echo: Echo,
    gpu_uuid: str | None = None,
) -> BenchSummary:
    """Warm up, run the timed steps with markers, write ``vllm.json``; returns its content."""
    batch = settings.batch_size
    prompts = synthetic_prompts(
        batch * (settings.repeats + 1), settings.input_len, vocab_size, settings.seed, skip_ids
    )
    batches = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    began = time.monotonic()
    generate(batches[0])  # warm-up: not a step, outside the report's window
    warmup_s = time.monotonic() - began
    echo(f"vllm warm-up: {warmup_s:.2f} s")
    run_dir.mkdir(parents=True, exist_ok=True)
    _set_aside_old_markers(run_dir)
    markers = MarkerWriter(run_dir, rank=0, local_rank=0, world_size=1, gpu_uuid=gpu_uuid)
    try:
        steps = timed_steps(generate, batches[1:], markers, echo)
    finally:
        markers.close()
    short = [s.step for s in steps if s.output_tokens != settings.tokens_per_step]
    if short:
        log.warning("steps %s did not generate %s tokens", short, settings.tokens_per_step)
    summary = BenchSummary(
        settings, run_dir, dict(versions), vocab_size, warmup_s, tuple(steps), tuple(short)
    )
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    echo(
        f"vllm: {summary.output_tokens} tokens in {summary.duration_s:.2f} s over "
        f"{len(steps)} steps, {summary.tokens_per_s or 0:.0f} tokens/s"
    )
    return summary


def _set_aside_old_markers(run_dir: Path) -> None:
    """A run directory used before (a failed run, run again) starts fresh markers."""
    path = RunDir(run_dir).marker(0)
    if path.exists():
        kept = path.with_name(f"superseded-{int(time.time())}-{path.name}")
        path.rename(kept)
        log.warning("earlier markers moved to %s", kept)


def _load_engine(
    settings: BenchSettings, model: Path
) -> tuple[Generate, int, list[int], dict[str, str]]:
    """Load ``model`` in vLLM: its generate, vocabulary size, special ids, versions.

    Raises:
        BenchError: vLLM is not installed, or there are not enough CUDA GPUs.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import vllm  # type: ignore[import-not-found, unused-ignore]
    except ImportError as e:
        raise BenchError(NO_VLLM) from e
    import torch

    require_gpus(
        torch.cuda.device_count() if torch.cuda.is_available() else 0, settings.tensor_parallel_size
    )
    llm = vllm.LLM(
        model=str(model),
        tensor_parallel_size=settings.tensor_parallel_size,
        seed=settings.seed,
        max_model_len=settings.input_len + settings.output_len,
    )
    sampling = vllm.SamplingParams(max_tokens=settings.output_len, ignore_eos=True, temperature=0)

    def generate(prompts: Prompts) -> list[int]:
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        outputs = llm.generate(requests, sampling, use_tqdm=False)
        return [len(out.outputs[0].token_ids) for out in outputs]

    tokenizer = llm.get_tokenizer()
    special = sorted(int(i) for i in getattr(tokenizer, "all_special_ids", []))
    versions = {"vllm": str(vllm.__version__), "torch": str(torch.__version__)}
    return generate, int(tokenizer.vocab_size), special, versions


def _first_gpu_uuid() -> str | None:
    """The UUID of the first GPU this process sees, for the markers; None if unknown."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return visible
    import pynvml

    try:
        pynvml.nvmlInit()
        try:
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(int(visible or 0)))
        finally:
            pynvml.nvmlShutdown()
    except (pynvml.NVMLError, ValueError):
        return None
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def main(argv: list[str]) -> int:
    """Run the workload with the settings JSON in ``argv[0]``; the exit status."""
    logging.basicConfig(level=logging.INFO, format="vllm_bench: %(message)s")
    if len(argv) != 1:
        print("usage: python -m toolkit.profile.vllm_bench SETTINGS_JSON", file=sys.stderr)
        return 2

    def echo(line: str) -> None:
        print(line, flush=True)

    try:
        settings, model, run_dir = parse_settings(argv[0], os.environ)
        generate, vocab_size, special, versions = _load_engine(settings, model)
        run_bench(
            settings, run_dir, generate, vocab_size, special, versions, echo, _first_gpu_uuid()
        )
    except RtkError as e:
        print(f"vllm_bench: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
