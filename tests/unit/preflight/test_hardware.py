"""The hardware table: the shipped file's citations, merging a user's file, errors, matching."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from toolkit.errors import HardwareError
from toolkit.preflight.hardware import default_path, load_hardware
from toolkit.preflight.hardware_table import HardwareTable


def user_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hardware.yaml"
    path.write_text(text)
    return path


def problems(excinfo: pytest.ExceptionInfo[HardwareError]) -> list[str]:
    return [str(p) for p in excinfo.value.problems]


@pytest.fixture(scope="module")
def table() -> HardwareTable:
    return load_hardware()


# -- the shipped file --------------------------------------------------------------------


def _numbers(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every number in the raw YAML with its path, and the mapping it sits in."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                found.append((f"{path}.{key}", node))
            else:
                found += _numbers(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _numbers(value, f"{path}[{i}]")
    return found


def test_every_number_in_the_shipped_file_is_cited() -> None:
    raw = yaml.safe_load(default_path().read_text())
    sources = raw["sources"]
    assert all(url.startswith("https://") for url in sources.values())
    numbers = _numbers({k: v for k, v in raw.items() if k != "policy"})
    assert len(numbers) > 100
    for path, holder in numbers:
        assert path.endswith(".value"), f"{path} is a bare number: cite it"
        refs = holder.get("source")
        refs = [refs] if isinstance(refs, str) else refs
        assert refs, f"{path} has no source"
        for ref in refs:
            assert ref in sources or ref.startswith("https://"), f"{path}: {ref}"


def test_the_policy_is_the_only_uncited_section_and_is_ordered(table: HardwareTable) -> None:
    assert 0 < table.fail_below < table.warn_below < 1
    assert set(table.efficiency) >= {"gemm_bf16", "memory", "host_device", "nvlink"}


def test_citations_resolve_to_urls(table: HardwareTable) -> None:
    h100 = table.gpu("h100-sxm")
    assert h100.peak_tflops["bf16"].value == 989
    assert h100.peak_tflops["bf16"].sources[0] == "https://www.nvidia.com/en-us/data-center/h100/"
    assert "sparsity" in h100.peak_tflops["bf16"].note
    assert h100.measured_memory_gb_s is not None
    assert h100.measured_memory_gb_s.sources == (
        "https://github.com/NVIDIA/DCGM/blob/master/nvvs/diag-skus.yaml.in",
    )


def test_the_models_the_issue_names_are_there(table: HardwareTable) -> None:
    for key in ("h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-40gb", "a100-sxm-80gb", "l40s"):
        spec = table.gpu(key)
        assert spec.tdp_w is not None or spec.memory_gb_s is not None, key
    for key in ("ib-hdr", "ib-ndr", "roce-100g", "roce-200g", "roce-400g"):
        assert table.interconnect(key).rate_gbit_s is not None
    assert table.interconnect("ib-ndr").link_layer == "InfiniBand"
    assert table.interconnect("roce-400g").link_layer == "Ethernet"


# -- matching NVML's view ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA L40S", "l40s"),
        ("  nvidia   l40s ", "l40s"),  # case and spacing do not matter
        ("H100 PCIe", "h100-pcie"),  # nor a missing vendor prefix
    ],
)
def test_nvml_names_match(table: HardwareTable, name: str, key: str) -> None:
    spec = table.match_gpu(name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize("name", ["Tesla T4", "NVIDIA H100", "NVIDIA H2000", "", None])
def test_unknown_names_match_nothing(table: HardwareTable, name: str | None) -> None:
    assert table.match_gpu(name) is None


def test_pci_device_id_wins_over_the_name(table: HardwareTable) -> None:
    # NVML's pciDeviceId carries the device in its upper 16 bits.
    by_id = table.match_gpu("something a newer driver calls it", 0x233010DE)
    assert by_id is not None and by_id.key == "h100-sxm"
    assert table.match_gpu(None, "0x2335") is not None
    assert table.match_gpu(None, "26B9").key == "l40s"  # type: ignore[union-attr]
    assert table.match_gpu("NVIDIA L40S", "ffff").key == "l40s"  # type: ignore[union-attr]
    assert table.match_gpu(None, "not-an-id") is None


# -- merging a user's file ---------------------------------------------------------------


def test_a_user_file_changes_one_value_and_keeps_the_rest(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        "gpus:\n  h100-sxm:\n    tdp_w: 600\n    peak_tflops:\n      bf16: 900\n"
        "policy:\n  warn_below: 0.9\n",
    )
    table = load_hardware(path)
    h100 = table.gpu("h100-sxm")
    assert h100.tdp_w is not None and h100.tdp_w.value == 600 and h100.tdp_w.sources == ()
    assert h100.peak_tflops["bf16"].value == 900
    assert h100.peak_tflops["fp8"].value == 1979  # merged per precision, not replaced
    assert h100.memory_gb_s is not None and h100.memory_gb_s.value == 3350
    assert (table.warn_below, table.fail_below) == (0.9, 0.75)
    assert table.files == (str(default_path()), str(path))


def test_a_user_model_is_added_and_wins_a_shared_name(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        "sources:\n  our-lab: https://lab.example/h100-capped\n"
        "gpus:\n  h100-capped:\n    nvml_names: [NVIDIA H100 80GB HBM3]\n"
        "    tdp_w: {value: 500, source: our-lab, note: capped fleet}\n"
        "interconnects:\n  roce-800g: {link_layer: Ethernet, rate_gbit_s: 800}\n",
    )
    table = load_hardware(path)
    spec = table.match_gpu("NVIDIA H100 80GB HBM3")
    assert spec is not None and spec.key == "h100-capped"
    assert spec.tdp_w is not None and spec.tdp_w.sources == ("https://lab.example/h100-capped",)
    assert table.gpu("h100-sxm").tdp_w is not None  # the default entry is still there
    assert table.interconnect("roce-800g").rate_gbit_s.value == 800  # type: ignore[union-attr]


def test_an_empty_user_file_changes_nothing(tmp_path: Path, table: HardwareTable) -> None:
    merged = load_hardware(user_file(tmp_path, "# nothing yet\n"))
    assert merged.gpus == table.gpus


# -- errors --------------------------------------------------------------------------------


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(tmp_path / "nope.yaml")
    assert problems(excinfo) == [f"{tmp_path / 'nope.yaml'}: no such file"]
    assert excinfo.value.exit_code == 3


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = user_file(tmp_path, "gpus:\n  h100-sxm: {tdp_w: [600\n")
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    (message,) = problems(excinfo)
    assert message.startswith(f"{path}:3: not valid YAML")


def test_unknown_keys_name_the_line_and_suggest(tmp_path: Path) -> None:
    path = user_file(tmp_path, "gpus:\n  h100-sxm:\n    tdp: 600\n    memory_gbs: 3000\n")
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    found = problems(excinfo)
    assert found[0].startswith(
        f"{path}:3: gpus.h100-sxm.tdp: unknown key 'tdp'; did you mean 'tdp_w'?"
    )
    assert found[1].startswith(f"{path}:4: gpus.h100-sxm.memory_gbs: unknown key")
    assert "'memory_gb_s'" in found[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "gpus:\n  x:\n    tdp_w: lots\n",
            "gpus.x.tdp_w: got 'lots'; expected a number or {value: N",
        ),
        ("gpus:\n  x:\n    tdp_w: -5\n", "gpus.x.tdp_w: got -5; expected a number greater than 0"),
        ("gpus:\n  x:\n    tdp_w: true\n", "gpus.x.tdp_w: got True; expected a number or {value"),
        (
            "gpus:\n  x:\n    tdp_w: {value: 0}\n",
            "gpus.x.tdp_w.value: got 0; expected greater than 0",
        ),
        ("gpus:\n  x:\n    peak_tflops: {int4: 9}\n", "gpus.x.peak_tflops.int4"),
        (
            "interconnects:\n  y: {link_layer: Ethernt}\n",
            "interconnects.y.link_layer: got 'Ethernt'",
        ),
        (
            "policy:\n  warn_below: 1.5\n",
            "policy.warn_below: got 1.5; expected less than or equal to 1",
        ),
        ("gpus:\n  x:\n    pci_device_ids: ['23300']\n", "gpus.x.pci_device_ids[0]"),
    ],
)
def test_bad_values_say_what_is_allowed(tmp_path: Path, text: str, expected: str) -> None:
    path = user_file(tmp_path, text)
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    assert any(expected in p and p.startswith(f"{path}:") for p in problems(excinfo)), problems(
        excinfo
    )


def test_fail_above_warn_is_refused_where_it_was_set(tmp_path: Path) -> None:
    path = user_file(tmp_path, "# ours\npolicy:\n  fail_below: 0.95\n")
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    assert problems(excinfo) == [
        f"{path}:3: policy.fail_below: got 0.95, above warn_below 0.85; "
        "fail_below must not exceed warn_below"
    ]


def test_an_unknown_source_key_is_refused(tmp_path: Path) -> None:
    path = user_file(tmp_path, "gpus:\n  x:\n    tdp_w: {value: 300, source: my-notes}\n")
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    (message,) = problems(excinfo)
    assert message.startswith(f"{path}:3: gpus.x.tdp_w.source: unknown source 'my-notes'")
    assert "nvidia-h100" in message  # the keys it could have meant


def test_a_name_claimed_twice_in_one_file_is_refused(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        "gpus:\n  a:\n    nvml_names: [NVIDIA X1]\n  b:\n    nvml_names: [nvidia  x1]\n",
    )
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    assert problems(excinfo) == [
        f"{path}:5: gpus.b.nvml_names: 'x1' is also claimed by gpus.a; one model per name"
    ]


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = user_file(tmp_path, "gpus:\n  x:\n    tdp_w: 300\n    tdp_w: 350\n")
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    assert problems(excinfo) == [
        f"{path}:4: gpus.x.tdp_w: key given twice (also on line 3); keep one"
    ]


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = user_file(tmp_path, "- h100\n")
    with pytest.raises(HardwareError) as excinfo:
        load_hardware(path)
    assert "expected a mapping with gpus: and interconnects:" in problems(excinfo)[0]


def test_an_unknown_model_lists_the_known_ones(table: HardwareTable) -> None:
    with pytest.raises(HardwareError) as excinfo:
        table.gpu("h100-sxm5")
    (message,) = problems(excinfo)
    assert "no entry 'h100-sxm5'; did you mean 'h100-sxm'?" in message
    assert "l40s" in message and "add it under gpus:" in message
    with pytest.raises(HardwareError, match="ib-ndr"):
        table.interconnect("ndr")
