"""Every user mistake gets one clear line: file:line: key path: what is wrong and allowed."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from conftest import rtk

from toolkit.errors import InventoryError
from toolkit.inventory import load_inventory

BASE = """\
cluster: demo
nodes:
  - host: gpu01
"""

CASES = {
    "unknown top-level key": (
        "cluster: demo\nnodez:\n  - host: gpu01\n",
        [
            "inv.yaml:1: nodes: required key is missing",
            "inv.yaml:2: nodez: unknown key 'nodez'; did you mean 'nodes'? allowed keys: cluster,",
        ],
    ),
    "unknown node key": (
        BASE + "    gpu: 8\n",
        ["inv.yaml:4: nodes[0].gpu: unknown key 'gpu'; did you mean 'gpus'? allowed keys:"],
    ),
    "wrong type": (
        BASE + "    gpus: eight\n",
        ["inv.yaml:4: nodes[0].gpus: got 'eight'; expected a valid integer"],
    ),
    "negative count": (
        BASE + "    gpus: -1\n",
        ["inv.yaml:4: nodes[0].gpus: got -1; expected greater than or equal to 0"],
    ),
    "transport not allowed": (
        BASE + "transport: sshh\n",
        ["inv.yaml:4: transport: got 'sshh'; expected 'ssh' or 'local'"],
    ),
    "network profile not allowed": (
        BASE + "network:\n  profile: infiniband\n",
        [
            "inv.yaml:5: network.profile: got 'infiniband'; expected 'auto', 'ib', 'roce' or "
            "'ethernet'"
        ],
    ),
    "nodes missing": (
        "cluster: demo\n",
        ["inv.yaml:1: nodes: required key is missing"],
    ),
    "bad cluster name": (
        "cluster: My Cluster\nnodes:\n  - host: a\n",
        [
            "inv.yaml:1: cluster: got 'My Cluster'; expected 1-32 characters of a-z, 0-9, '_' and "
            "'-', starting with a letter or digit"
        ],
    ),
    "duplicate hosts across entries": (
        "cluster: demo\nnodes:\n  - host: gpu[01-03]\n  - host: gpu02\n",
        [
            "inv.yaml:4: nodes[1].host: host 'gpu02' is listed twice (first in nodes[0]); each host "
            "may appear once"
        ],
    ),
    "port clash": (
        BASE + "ports:\n  gcs: 6379\n  dashboard: 6379\n",
        ["inv.yaml:6: ports.dashboard: port 6379 is also ports.gcs; every Ray port must differ"],
    ),
    "port in the ephemeral range": (
        BASE + "ports:\n  dashboard_agent_listen: 52365\n",
        [
            "inv.yaml:5: ports.dashboard_agent_listen: port 52365 lies in Linux's ephemeral range "
            "32768-60999, where the kernel hands out random ports and Ray collides with them; "
            "choose a port below 32768"
        ],
    ),
    "port inside the worker range": (
        BASE + "ports:\n  gcs: 12000\n",
        [
            "inv.yaml:5: ports.gcs: port 12000 lies inside the worker range 10002-19999; move it or "
            "the range"
        ],
    ),
    "port out of range": (
        BASE + "ports:\n  gcs: 70000\n",
        ["inv.yaml:5: ports.gcs: got 70000; expected less than or equal to 65535"],
    ),
    "worker range reversed": (
        BASE + "ports:\n  min_worker: 15000\n  max_worker: 14000\n",
        ["inv.yaml:6: ports.max_worker: got 14000, below ports.min_worker 15000"],
    ),
    "range that expands to nothing": (
        "cluster: demo\nnodes:\n  - host: gpu[]\n",
        [
            "inv.yaml:3: nodes[0].host: got 'gpu[]'; empty brackets '[]' (write ranges like "
            "gpu[01-16])"
        ],
    ),
    "backwards range": (
        "cluster: demo\nnodes:\n  - host: gpu[09-02]\n",
        [
            "inv.yaml:3: nodes[0].host: got 'gpu[09-02]'; range '09-02' runs backwards (write ranges "
            "like gpu[01-16])"
        ],
    ),
    "host name with shell characters": (
        'cluster: demo\nnodes:\n  - host: "a\';touch${IFS}/tmp/x"\n',
        [
            'inv.yaml:3: nodes[0].host: got "a\';touch${IFS}/tmp/x"; a host name is letters, '
            "digits, '.', '-', '_' and ':' (ranges in [..])"
        ],
    ),
    "head not in the node list": (
        BASE + "head: gpu99\n",
        ["inv.yaml:4: head: got 'gpu99'; the head must be one of the nodes: gpu01"],
    ),
    "missing key file": (
        "cluster: demo\ndefaults:\n  ssh:\n    key: keys/id_missing\nnodes:\n  - host: a\n",
        ["inv.yaml:4: defaults.ssh.key: got 'keys/id_missing'; no such file ("],
    ),
    "key given twice": (
        "cluster: demo\nnodes:\n  - host: a\ncluster: other\n",
        ["inv.yaml:4: cluster: key given twice (also on line 1); keep one"],
    ),
    "not YAML": (
        "cluster: demo\nnodes: [\n",
        ["inv.yaml:3: not valid YAML: expected the node content, but found '<stream end>'"],
    ),
    "min_nodes above the node count": (
        BASE + "min_nodes: 3\n",
        ["inv.yaml:4: min_nodes: got 3; the inventory has only 1 nodes"],
    ),
    "address range of another length": (
        "cluster: demo\nnodes:\n  - host: gpu[01-03]\n    address: 10.0.0.[1-2]\n",
        [
            "inv.yaml:4: nodes[0].address: got '10.0.0.[1-2]' (2 addresses) for 3 hosts; give a "
            "range of the same length, or omit address to use the host names"
        ],
    ),
    "venv and python both": (
        "cluster: demo\ndefaults:\n  venv: /opt/v\n  python: /usr/bin/python3\nnodes:\n"
        "  - host: a\n",
        [
            "inv.yaml:4: defaults.python: give either venv or python, not both (venv implies "
            "<venv>/bin/python)"
        ],
    ),
    "local transport with two nodes": (
        "cluster: demo\ntransport: local\nnodes:\n  - host: a\n  - host: b\n",
        [
            "inv.yaml:2: transport: got 'local' with 2 nodes; local runs exactly one node on this "
            "machine (use transport: ssh for more)"
        ],
    ),
    "built-in resource name": (
        BASE + "    resources:\n      GPU: 8\n",
        [
            "inv.yaml:5: nodes[0].resources.GPU: 'GPU' is a built-in Ray resource; use the node's "
            "'gpus' key"
        ],
    ),
    "temp dir too long": (
        BASE + "ray:\n  temp_dir: /scratch/a/very/long/path/for/ray/temporary/files/x\n",
        [
            "inv.yaml:5: ray.temp_dir: got '/scratch/a/very/long/path/for/ray/temporary/files/x' "
            "(51 characters); at most 48, because Ray's unix socket paths below it are limited to "
            "107 characters"
        ],
    ),
    "relative temp dir": (
        BASE + "ray:\n  temp_dir: tmp/ray\n",
        ["inv.yaml:5: ray.temp_dir: got 'tmp/ray'; give an absolute path such as /tmp/rtk"],
    ),
    "environment variable name": (
        BASE + "    env:\n      NCCL-DEBUG: INFO\n",
        [
            "inv.yaml:5: nodes[0].env.NCCL-DEBUG: got 'NCCL-DEBUG'; a variable name is letters, "
            "digits and '_', not starting with a digit"
        ],
    ),
    "empty file": (
        "",
        ["inv.yaml: got an empty file; expected a mapping with cluster: and nodes:"],
    ),
    "slurm time format": (
        BASE + "slurm:\n  time: 4 hours\n",
        [
            "inv.yaml:5: slurm.time: got '4 hours'; expected minutes, HH:MM:SS or D-HH:MM:SS, "
            "e.g. 04:00:00"
        ],
    ),
    "object store size": (
        BASE + "ray:\n  object_store_memory: lots\n",
        ["inv.yaml:5: ray.object_store_memory: got 'lots'; expected a valid integer"],
    ),
}


def _problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> list[str]:
    monkeypatch.chdir(tmp_path)
    Path("inv.yaml").write_text(text)
    with pytest.raises(InventoryError) as caught:
        load_inventory("inv.yaml")
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize("case", sorted(CASES))
def test_mistake_gets_one_clear_line(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, expected = CASES[case]
    problems = _problems(tmp_path, monkeypatch, text)
    assert len(problems) == len(expected), problems
    for got, want in zip(problems, expected, strict=True):
        assert got.startswith(want), f"\n got: {got}\nwant: {want}"


def test_there_are_at_least_fifteen_distinct_mistakes() -> None:
    messages = {want[0].split(": ", 2)[-1][:30] for _, want in CASES.values()}
    assert len(messages) >= 15


def test_all_problems_reported_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = textwrap.dedent("""\
        cluster: demo
        head: nowhere
        nodes:
          - host: gpu[01-02]
          - host: gpu01
        ports:
          gcs: 40000
    """)
    problems = _problems(tmp_path, monkeypatch, text)
    assert [p.split(": ")[1] for p in problems] == ["head", "nodes[1].host", "ports.gcs"]
    assert [p.split(":")[1] for p in problems] == ["2", "5", "7"]


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no such file"):
        load_inventory(tmp_path / "absent.yaml")


def test_cli_check_prints_lines_and_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("cluster: demo\nnodes:\n  - host: gpu01\n    gpus: eight\n  - hots: x\n")
    done = rtk("inventory", "check", str(path))
    assert done.returncode == 3
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"rtk: {path}:4: nodes[0].gpus: got 'eight'; expected a valid integer",
        f"rtk: {path}:5: nodes[1].host: required key is missing",
        f"rtk: {path}:5: nodes[1].hots: unknown key 'hots'; did you mean 'host'? allowed keys: "
        "address, container, cpus, env, gpus, host, python, ray, resources, ssh, venv",
    ]


def test_a_key_under_an_unknown_users_home_is_a_missing_file(tmp_path: Path) -> None:
    # Path.expanduser raised RuntimeError for ~nosuchuser.
    (tmp_path / "inv.yaml").write_text(BASE + "    ssh: {key: ~nosuchuser-rtk/id}\n")
    with pytest.raises(
        InventoryError, match=r"nodes\[0\]\.ssh\.key: got '~nosuchuser-rtk/id'; no such"
    ):
        load_inventory(tmp_path / "inv.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "    resources: {nvlink: .inf}\n",
            "nodes[0].resources.nvlink: got inf; expected a finite number",
        ),
        (
            "    resources: {nvlink: .nan}\n",
            "nodes[0].resources.nvlink: got nan; expected a finite number",
        ),
        (
            "    resources: {nvlink: -1}\n",
            "nodes[0].resources.nvlink: got -1; expected greater than or equal to 0",
        ),
        ("ray: {wait_timeout_s: .inf}\n", "ray.wait_timeout_s: got inf; expected a finite number"),
        ("defaults: {ssh: {connect_timeout_s: .inf}}\n", "defaults.ssh.connect_timeout_s: got inf"),
    ],
)
def test_amounts_and_timeouts_are_finite_and_not_negative(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "inv.yaml").write_text(BASE + text)
    with pytest.raises(InventoryError, match=re.escape(message)):
        load_inventory(tmp_path / "inv.yaml")


def test_a_key_with_a_newline_stays_on_its_problems_line(tmp_path: Path) -> None:
    (tmp_path / "inv.yaml").write_text(BASE + '    "gp\\nus": 1\n')
    with pytest.raises(InventoryError) as caught:
        load_inventory(tmp_path / "inv.yaml")
    assert [str(p) for p in caught.value.problems] == [
        f"{tmp_path / 'inv.yaml'}:4: nodes[0].'gp\\nus': unknown key 'gp\\nus'; did you mean 'gpus'? allowed keys: "
        "address, container, cpus, env, gpus, host, python, ray, resources, ssh, venv"
    ]
