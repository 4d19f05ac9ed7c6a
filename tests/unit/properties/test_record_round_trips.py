"""What parses, round-trips: the typed records rtk writes read back to the same value.

Each record crossing a process or a file (``state.json``, the trainer's and the
samplers' options in a job's entrypoint) is generated at random, written as JSON text,
read back, and must be equal to what was written; a change that drops or re-types a
field on either side fails here.
"""

from __future__ import annotations

import json
import math

from hostile_input import examples, hostile_text
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.state.cluster_state import ClusterState, RecordedRun
from toolkit.telemetry.options import TelemetryOptions
from toolkit.train.config import PRECISIONS, PRESETS, STRATEGIES, TrainConfig

texts = st.one_of(st.text(max_size=40), hostile_text())
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def through_json(data: object) -> object:
    """What a reader of the file gets back."""
    return json.loads(json.dumps(data))


runs = st.builds(RecordedRun, texts, texts, finite)
states = st.builds(
    ClusterState,
    cluster=st.none() | texts,
    source=st.none() | texts,
    head=st.none() | texts,
    dashboard_url=st.none() | texts,
    temp_dir=st.none() | texts,
    nodes=st.lists(texts, max_size=4).map(tuple),
    up_at_wall_s=st.none() | finite,
    nodes_rtk_digest=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
    runs=st.lists(runs, max_size=3).map(tuple),
    other=st.dictionaries(
        st.text(max_size=12).filter(lambda k: k not in ClusterState.KNOWN), json_values, max_size=3
    ),
)


@settings(max_examples=examples(200))
@given(states)
def test_cluster_state_reads_back_as_written(state: ClusterState) -> None:
    assert ClusterState.from_json(through_json(state.to_json())) == state


options = st.builds(
    TelemetryOptions,
    sensors=st.sampled_from(["auto", "host", "nvml", "host,nvml"]),
    rate_hz=st.floats(0.1, 50),
    power_rate_hz=st.sampled_from([0.0, 20.0, 50.0]),
    prometheus_port=st.integers(0, 65535),
    baseline_s=st.floats(0, 600),
    cooldown_max_s=st.floats(0, 600),
    energy_rate_hz=st.floats(0, 10),
)


@settings(max_examples=examples(200))
@given(options)
def test_telemetry_options_read_back_as_written(opts: TelemetryOptions) -> None:
    assert TelemetryOptions.from_json(through_json(opts.to_json())) == opts  # type: ignore[arg-type]


configs = st.builds(
    TrainConfig,
    run_dir=texts,
    model_size=st.sampled_from(list(PRESETS)),
    batch_size=st.integers(1, 64),
    precision=st.sampled_from(PRECISIONS),
    strategy=st.sampled_from(STRATEGIES),
    learning_rate=st.floats(1e-6, 1.0),
    max_steps=st.integers(1, 10**6),
    resources_per_worker=st.dictionaries(
        st.sampled_from(["CPU", "GPU", "memory"]), finite.map(abs)
    ),
    compile=st.sampled_from(["auto", "on", "off"]),
    straggle=st.text(max_size=20),
    data=st.none() | texts,
    energy_rate_hz=st.floats(0, 10),
)


@settings(max_examples=examples(200))
@given(configs)
def test_train_config_reads_back_as_written(config: TrainConfig) -> None:
    again = TrainConfig.from_json(through_json(config.to_json()))  # type: ignore[arg-type]
    assert again == config
    assert all(math.isfinite(v) for v in again.resources_per_worker.values())
