"""Load the hardware table: what each GPU model and interconnect is expected to do.

The defaults are rtk's ``templates/hardware.yaml``, where every number cites a vendor
datasheet or a published measurement. A user's file of the same shape is merged over
them (``load_hardware``): an entry is merged field by field, so a file may change one
value of a model or add models of its own. The result is a
``toolkit.preflight.hardware_table.HardwareTable``; ``toolkit.preflight.load.gpu_limits``
turns an entry of it into the thresholds the checks use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from toolkit.errors import HardwareError, Problem
from toolkit.fields import is_number
from toolkit.inventory.problems import format_path, parse_yaml, problems_from_validation
from toolkit.inventory.yamlmap import KeyPath, LocatedData
from toolkit.preflight.hardware_table import (
    Cited,
    GpuSpec,
    HardwareTable,
    InterconnectSpec,
    LinkLayer,
    name_key,
)
from toolkit.resources import data_dir

DEFAULT_FILE = "hardware.yaml"
Precision = Literal["bf16", "fp16", "tf32", "fp8", "fp32"]
EfficiencyKey = Literal[
    "gemm_bf16",
    "gemm_fp16",
    "gemm_tf32",
    "gemm_fp8",
    "gemm_fp32",
    "memory",
    "host_device",
    "nvlink",
]


# -- the file, as validated --------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _number_or_cited(value: Any) -> Any:
    if is_number(value):
        if value <= 0:  # checked here so that the error names the key, not a .value
            raise PydanticCustomError("cited", "expected a number greater than 0")
        return {"value": value}
    if isinstance(value, Mapping):
        return value
    raise PydanticCustomError("cited", "expected a number or {value: N, source: ...}")


class _Cited(_Strict):
    value: Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]
    source: str | list[str] | None = None
    note: str | None = None


Cited_ = Annotated[_Cited, BeforeValidator(_number_or_cited)]
Fraction = Annotated[float, Field(gt=0, le=1, strict=True)]


class _GpuModel(_Strict):
    name: str | None = None
    nvml_names: list[str] = Field(default_factory=list)
    pci_device_ids: list[Annotated[str, Field(pattern=r"^(0x)?[0-9a-fA-F]{4}$")]] = Field(
        default_factory=list
    )
    peak_tflops: dict[Precision, Cited_] = Field(default_factory=dict)
    measured_tflops: dict[Precision, Cited_] = Field(default_factory=dict)
    memory_gb_s: Cited_ | None = None
    measured_memory_gb_s: Cited_ | None = None
    pcie_gen: Cited_ | None = None
    pcie_width: Cited_ | None = None
    measured_host_device_gb_s: Cited_ | None = None
    nvlink_unidir_gb_s: Cited_ | None = None
    measured_nvlink_gb_s: Cited_ | None = None
    tdp_w: Cited_ | None = None
    boost_clock_mhz: Cited_ | None = None


class _InterconnectModel(_Strict):
    name: str | None = None
    link_layer: LinkLayer | None = None
    rate_gbit_s: Cited_ | None = None


class _PolicyModel(_Strict):
    warn_below: Fraction | None = None
    fail_below: Fraction | None = None


class _PcieModel(_Strict):
    x16_unidir_gb_s: dict[int, Cited_] = Field(default_factory=dict)


class _FileModel(_Strict):
    sources: dict[str, str] = Field(default_factory=dict)
    policy: _PolicyModel = Field(default_factory=_PolicyModel)
    efficiency: dict[EfficiencyKey, Cited_] = Field(default_factory=dict)
    pcie: _PcieModel = Field(default_factory=_PcieModel)
    gpus: dict[str, _GpuModel] = Field(default_factory=dict)
    interconnects: dict[str, _InterconnectModel] = Field(default_factory=dict)


# -- loading and merging -----------------------------------------------------------------


YamlMapping = Mapping[object, object]
"""A YAML mapping as read, before ``_FileModel`` checks it: any key, any value.

Its keys are not all strings (``pcie.x16_unidir_gb_s`` is keyed by generation), and
what is read out of it is narrowed where it is read.
"""


@dataclass
class _Layer:
    source: str
    located: LocatedData
    data: YamlMapping


def default_path() -> Path:
    """The hardware file rtk ships (``templates/hardware.yaml``)."""
    return data_dir("templates") / DEFAULT_FILE


def load_hardware(
    user_file: str | Path | None = None, defaults: str | Path | None = None
) -> HardwareTable:
    """The table rtk ships, with ``user_file`` (if any) merged over it.

    Args:
        user_file: A file of the same shape, from the inventory or the command line.
        defaults: Another defaults file (tests); rtk's own when None.

    Raises:
        HardwareError: A file is missing, not YAML, or invalid; every problem listed
            with the file, line, key path and how to fix it.
    """
    layers = [_read_layer(Path(defaults) if defaults else default_path())]
    if user_file is not None:
        layers.append(_read_layer(Path(user_file)))
    merged: YamlMapping = {}
    for layer in layers:
        merged = _merge(merged, layer.data)
    try:
        model = _FileModel.model_validate(merged)
    except ValidationError as e:  # each layer passed alone; name the last one
        last = layers[-1]
        raise HardwareError(
            problems_from_validation(e, _FileModel, last.located, last.source)
        ) from e
    problems = _cross_checks(model, layers)
    if problems:
        raise HardwareError(problems)
    return _table(model, layers)


def _read_layer(path: Path) -> _Layer:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HardwareError([Problem(source, None, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise HardwareError([Problem(source, None, "", f"cannot read it: {e}")]) from e
    located, problems = parse_yaml(text, source, HardwareError)
    data = located.data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(
            Problem(
                source,
                located.line_of(()),
                "",
                f"got a {type(data).__name__}; expected a mapping with gpus: and interconnects:",
            )
        )
        raise HardwareError(problems)
    try:
        _FileModel.model_validate(data)
    except ValidationError as e:
        problems.extend(problems_from_validation(e, _FileModel, located, source))
    if problems:
        raise HardwareError(problems)
    return _Layer(source, located, data)


def _merge(base: YamlMapping, over: YamlMapping) -> dict[object, object]:
    """``over`` merged into ``base``: mappings merge key by key, other values replace.

    A cited number (a mapping with ``value``) is one value: it replaces, never merges.
    """
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, Mapping) and "value" not in old:
            out[key] = _merge(old, value)
        else:
            out[key] = value
    return out


def _where(layers: list[_Layer], path: KeyPath) -> tuple[str, int | None]:
    """The file (and line) that last set ``path``: the one whose value counts."""
    for layer in reversed(layers):
        node: object = layer.data
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
        else:
            return layer.source, layer.located.line_of(path)
    return layers[0].source, None


def _cross_checks(model: _FileModel, layers: list[_Layer]) -> list[Problem]:
    problems = []
    warn, fail = model.policy.warn_below, model.policy.fail_below
    if warn is None or fail is None:
        missing = "warn_below" if warn is None else "fail_below"
        source, line = _where(layers, ("policy",))
        problems.append(
            Problem(source, line, f"policy.{missing}", "required; a fraction such as 0.8")
        )
    elif fail > warn:
        source, line = _where(layers, ("policy", "fail_below"))
        problems.append(
            Problem(
                source,
                line,
                "policy.fail_below",
                f"got {fail:g}, above warn_below {warn:g}; fail_below must not exceed warn_below",
            )
        )
    for path, cited in _cited_values(model):
        for ref in _refs(cited.source):
            if "://" not in ref and ref not in model.sources:
                source, line = _where(layers, (*path, "source"))
                problems.append(
                    Problem(
                        source,
                        line,
                        format_path((*path, "source")),
                        f"unknown source '{ref}'; give a URL or a key of sources: "
                        f"({', '.join(sorted(model.sources)) or 'none defined'})",
                    )
                )
    for key, gpu in model.gpus.items():
        for other_key, other in model.gpus.items():
            shared = {name_key(n) for n in gpu.nvml_names} & {name_key(n) for n in other.nvml_names}
            if other_key > key and shared and _same_layer(layers, key, other_key):
                source, line = _where(layers, ("gpus", other_key, "nvml_names"))
                problems.append(
                    Problem(
                        source,
                        line,
                        f"gpus.{other_key}.nvml_names",
                        f"'{sorted(shared)[0]}' is also claimed by gpus.{key}; one model per name",
                    )
                )
    return problems


def _same_layer(layers: list[_Layer], a: str, b: str) -> bool:
    return (
        _where(layers, ("gpus", a, "nvml_names"))[0] == _where(layers, ("gpus", b, "nvml_names"))[0]
    )


def _cited_values(model: _FileModel) -> list[tuple[KeyPath, _Cited]]:
    found: list[tuple[KeyPath, _Cited]] = [
        (("efficiency", k), v) for k, v in model.efficiency.items()
    ]
    found += [(("pcie", "x16_unidir_gb_s", k), v) for k, v in model.pcie.x16_unidir_gb_s.items()]
    for section, entries in (("gpus", model.gpus), ("interconnects", model.interconnects)):
        for key, entry in entries.items():
            for name, value in entry:
                if isinstance(value, _Cited):
                    found.append(((section, key, name), value))
                elif isinstance(value, dict):
                    found += [((section, key, name, p), v) for p, v in value.items()]
    return found


def _refs(source: str | list[str] | None) -> list[str]:
    if source is None:
        return []
    return [source] if isinstance(source, str) else list(source)


def _table(model: _FileModel, layers: list[_Layer]) -> HardwareTable:
    def cite(value: _Cited | None) -> Cited | None:
        if value is None:
            return None
        urls = tuple(model.sources.get(r, r) for r in _refs(value.source))
        return Cited(value.value, urls, value.note or "")

    def cites(values: Mapping[Any, _Cited]) -> dict[Any, Cited]:
        return {k: c for k, v in values.items() if (c := cite(v)) is not None}

    # A user's models first: where a default entry claims the same name, theirs wins.
    # Otherwise the merged files' order, which model.gpus keeps (sorted is stable).
    user_gpus = layers[-1].data.get("gpus") if len(layers) > 1 else None
    user_keys = set(user_gpus) if isinstance(user_gpus, Mapping) else set()
    order = sorted(model.gpus, key=lambda k: k not in user_keys)
    gpus = {
        key: GpuSpec(
            key=key,
            name=g.name or key,
            nvml_names=tuple(g.nvml_names),
            pci_device_ids=tuple(d.lower().removeprefix("0x") for d in g.pci_device_ids),
            peak_tflops=cites(g.peak_tflops),
            measured_tflops=cites(g.measured_tflops),
            memory_gb_s=cite(g.memory_gb_s),
            measured_memory_gb_s=cite(g.measured_memory_gb_s),
            pcie_gen=cite(g.pcie_gen),
            pcie_width=cite(g.pcie_width),
            measured_host_device_gb_s=cite(g.measured_host_device_gb_s),
            nvlink_unidir_gb_s=cite(g.nvlink_unidir_gb_s),
            measured_nvlink_gb_s=cite(g.measured_nvlink_gb_s),
            tdp_w=cite(g.tdp_w),
            boost_clock_mhz=cite(g.boost_clock_mhz),
        )
        for key in order
        for g in (model.gpus[key],)
    }
    interconnects = {
        key: InterconnectSpec(key, i.name or key, i.link_layer, cite(i.rate_gbit_s))
        for key, i in model.interconnects.items()
    }
    assert model.policy.warn_below is not None and model.policy.fail_below is not None
    return HardwareTable(
        gpus=gpus,
        interconnects=interconnects,
        warn_below=model.policy.warn_below,
        fail_below=model.policy.fail_below,
        efficiency=cites(model.efficiency),
        pcie_x16_unidir_gb_s=cites(model.pcie.x16_unidir_gb_s),
        files=tuple(layer.source for layer in layers),
    )
