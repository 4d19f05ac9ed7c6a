"""The bandwidth job's options: written by the host as the job's argument, read by the job."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from toolkit.errors import RunDirError
from toolkit.preflight.bandwidth.job_options import BandwidthJobOptions, thresholds_from
from toolkit.preflight.checks import Thresholds
from toolkit.rundir.record_base import record_fields


def test_the_options_round_trip_through_the_jobs_argument() -> None:
    options = BandwidthJobOptions(
        nodes=("n1", "n2"),
        duration_s=2.0,
        retries=1,
        thresholds=Thresholds(tcp_min_gbit_s=5.0, busbw_min_gb_s=30.0),
        sizes_bytes=(1 << 20, 1 << 30),
        busbw_expected_min_gb_s=80.0,
    )
    written = json.loads(json.dumps(options.to_json()))
    assert list(written) == [
        "nodes", "duration_s", "retries", "sizes_bytes", "busbw_expected_min_gb_s", "thresholds",
    ]  # fmt: skip
    assert written["thresholds"]["tcp_min_gbit_s"] == 5.0
    assert BandwidthJobOptions.from_json(written) == options
    plain = BandwidthJobOptions(("n1",), 1.0, 0)
    assert plain.to_json()["sizes_bytes"] is None
    assert BandwidthJobOptions.from_json(plain.to_json()) == plain


def test_every_threshold_is_read_back() -> None:
    """A threshold added to ``Thresholds`` but not read back would come back as its default."""
    changed = Thresholds(*(10 + i for i in range(len(fields(Thresholds)))))
    data = json.loads(json.dumps(BandwidthJobOptions(("n1",), 1.0, 0, changed).to_json()))
    assert thresholds_from(record_fields(data["thresholds"], "t")) == changed
    assert thresholds_from(record_fields({}, "t")) == Thresholds()


@pytest.mark.parametrize(
    ("change", "wrong"),
    [
        ({"nodes": "n1"}, "nodes: expected a list of text"),
        ({"retries": 1.5}, "retries: expected an int"),
        ({"sizes_bytes": [1, "2"]}, "sizes_bytes: expected a list of integers"),
        ({"thresholds": {"tcp_min_gbit_s": "fast"}}, "thresholds: tcp_min_gbit_s"),
    ],
)
def test_malformed_options_name_the_field(change: dict[str, object], wrong: str) -> None:
    good = BandwidthJobOptions(("n1", "n2"), 2.0, 1).to_json()
    with pytest.raises(RunDirError) as caught:
        BandwidthJobOptions.from_json({**good, **change})
    assert str(caught.value).startswith("bandwidth job options: ")
    assert wrong in str(caught.value)
