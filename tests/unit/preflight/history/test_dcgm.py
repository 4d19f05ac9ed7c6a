"""DCGM diagnostics JSON (both shapes) read and graded."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from toolkit.preflight.history.dcgm import (
    DcgmDiag,
    DcgmResult,
    DcgmWarning,
    dcgm_checks,
    parse_dcgm_diag,
)

DATA = REPO / "tests" / "data" / "dcgm"


def parse(name: str) -> DcgmDiag:
    return parse_dcgm_diag((DATA / name).read_text())


def test_a_passing_dcgm4_run() -> None:
    diag = parse("dcgm4-r1-pass.json")
    assert diag.version == "4.2.3" and diag.error is None
    assert diag.results == (
        DcgmResult("Deployment", "software", "GPU 0", "pass"),
        DcgmResult("Deployment", "software", "GPU 1", "pass"),
    )
    (check,) = dcgm_checks("n1", diag)
    assert (check.name, check.scope, check.status) == ("gpu.dcgm_diag", "n1", "pass")
    assert check.measured == "2 result(s) passed (DCGM 4.2.3)"
    assert check.threshold == "dcgmi diag -r 1: no failed test" and check.hint == ""


def test_a_failing_dcgm4_run_names_the_gpu_and_the_error() -> None:
    diag = parse("dcgm4-r2-fail.json")
    memory = [r for r in diag.results if r.test == "memory"]
    assert [(r.entity, r.status) for r in memory] == [("GPU 0", "pass"), ("GPU 1", "fail")]
    assert memory[1].warnings == (
        DcgmWarning("Detected 2 volatile double-bit ECC error(s) in GPU 1.", 4, 6),
        DcgmWarning("GPU 1 has a row remapping failure.", 80, 2),
    )
    pcie = [r for r in diag.results if r.test == "pcie"]
    assert [r.status for r in pcie] == ["skip", "skip"]
    assert pcie[0].info == ("Skipping test: PCIe test is not supported in this configuration",)
    (check,) = dcgm_checks("n1", diag, level=2)
    assert check.status == "fail"
    assert check.measured == (
        "memory on GPU 1: fail: Detected 2 volatile double-bit ECC error(s) in GPU 1. "
        "[error 4] (+1 more); skipped: pcie (DCGM 4.2.3)"
    )
    assert check.threshold == "dcgmi diag -r 2: no failed test"
    assert "dcgmi diag -r 2" in check.hint


def test_the_dcgm3_shape() -> None:
    diag = parse("dcgm3-r1.json")
    assert diag.version == "3.3.8" and diag.error is None
    assert len(diag.results) == 9
    (failed,) = [r for r in diag.results if r.status == "fail"]
    assert (failed.category, failed.test, failed.entity) == (
        "Deployment",
        "Persistence Mode",
        "GPU 0",
    )
    # DCGM 3 wrote a deployment test's message under "warnings" inside the warning.
    assert failed.warnings[0].message.startswith("Persistence mode for GPU 0 is currently disabled")
    assert failed.warnings[0].error_id == 29
    everyone = [r for r in diag.results if r.test == "Denylist"]
    assert everyone[0].entity == ""  # a whole-node result names no GPU
    (check,) = dcgm_checks("n1", diag)
    assert check.status == "fail"
    assert check.measured.startswith("Persistence Mode on GPU 0: fail: Persistence mode for GPU 0")
    assert check.measured.endswith("[error 29]; skipped: Inforom (DCGM 3.3.8)")


def test_a_runtime_error_warns() -> None:
    diag = parse("dcgm-runtime-error.json")
    assert diag.results == ()
    assert diag.error == "Error: unable to establish a connection to the specified host: localhost"
    (check,) = dcgm_checks("n1", diag)
    assert check.status == "warn"
    assert check.measured.startswith("diagnostic incomplete: Error: unable to establish")
    assert "nv-hostengine" in check.hint


def test_iterations_are_read_run_by_run() -> None:
    diag = parse("dcgm4-iterations.json")
    assert diag.version == "4.2.3"
    assert len(diag.results) == 2 + 6
    assert dcgm_checks("n1", diag)[0].status == "fail"


def test_a_warn_status_warns() -> None:
    data = json.loads((DATA / "dcgm4-r1-pass.json").read_text())
    data["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][1]["status"] = "Warn"
    (check,) = dcgm_checks("n1", parse_dcgm_diag(json.dumps(data)))
    assert check.status == "warn" and check.measured.startswith("software on GPU 1: warn")


def test_all_skipped_is_not_a_pass() -> None:
    text = json.dumps(
        {
            "DCGM Diagnostic": {
                "test_categories": [
                    {
                        "category": "Integration",
                        "tests": [
                            {"name": "pcie", "results": [], "test_summary": {"status": "Skip"}}
                        ],
                    }
                ]
            }
        }
    )
    diag = parse_dcgm_diag(text)
    assert diag.results == (DcgmResult("Integration", "pcie", "", "skip"),)  # from the summary
    (check,) = dcgm_checks("n1", diag)
    assert check.status == "warn" and check.measured == "0 result(s) passed; skipped: pcie"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "output is not JSON"),
        ("Error: dcgmi: command not found", "output is not JSON"),
        ('{"DCGM Diagnostic": {"test_categories": [', "output is not JSON"),  # cut short
        ("[1, 2]", "output is not a JSON object"),
        ('{"something": "else"}', "no 'DCGM Diagnostic' object"),
        ('{"DCGM Diagnostic": {}}', "no test results"),
        ('{"DCGM Diagnostic": {"test_categories": ["x"]}}', "a test category is not an object"),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
            '[{"name": "memory", "results": [{"status": "Maybe"}]}]}]}}',
            "memory: unknown status 'Maybe'",
        ),
    ],
)
def test_unreadable_output_is_an_incomplete_run_not_an_exception(text: str, error: str) -> None:
    diag = parse_dcgm_diag(text)
    assert diag.error is not None and error in diag.error
    (check,) = dcgm_checks("n1", diag)
    assert check.status == "warn" and error in check.measured


def test_odd_fields_are_tolerated() -> None:
    text = json.dumps(
        {
            "DCGM GPU Diagnostic": {
                "test_categories": [
                    {
                        "category": "Hardware",
                        "tests": [
                            {
                                "name": "GPU Memory",
                                "results": [
                                    {
                                        "gpu_id": "3",
                                        "status": "fail",
                                        "info": "one string in DCGM 3",
                                        "warnings": [
                                            "not an object",
                                            {
                                                "warning": "Memory errors",
                                                "error_id": "17",
                                                "error_severity": True,
                                            },
                                        ],
                                    }
                                ],
                            }
                        ],
                    }
                ]
            }
        }
    )
    (result,) = parse_dcgm_diag(text).results
    assert result.entity == "GPU 3" and result.status == "fail"
    assert result.info == ("one string in DCGM 3",)
    assert result.warnings == (DcgmWarning("Memory errors", 17, None),)
