"""Whether jobs ship rtk's source: the digest on both sides, and what preflight learns."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from conftest import REPO
from scripted_transport import ScriptedTransport, answer

from toolkit.cluster import build_plan
from toolkit.cluster.shipped_code import (
    STATE_KEY,
    code_env,
    known_same,
    local_digest,
    nodes_differ,
    package_dir,
    remember,
)
from toolkit.cluster.state import StateStore
from toolkit.flows.session import Session
from toolkit.flows.workload import TrainWorkload, job_request
from toolkit.inventory import load_inventory
from toolkit.node.facts import host_facts, source_digest
from toolkit.node.host_facts import SoftwareFacts
from toolkit.preflight.runner import run_preflight
from toolkit.train.config import TrainConfig


def copy_of_rtk(into: Path) -> Path:
    target = into / "toolkit"
    shutil.copytree(package_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_a_copy_has_the_same_digest_and_any_changed_byte_or_file_another(tmp_path: Path) -> None:
    copy = copy_of_rtk(tmp_path)
    assert source_digest(str(copy)) == local_digest()
    # Compiled files do not count: a node that ran rtk once has them.
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    (copy / "shell.pyc").write_bytes(b"compiled")
    assert source_digest(str(copy)) == local_digest()
    errors = copy / "errors.py"
    errors.write_bytes(errors.read_bytes() + b"\n")
    assert source_digest(str(copy)) != local_digest()
    errors.write_bytes(errors.read_bytes()[:-1])
    assert source_digest(str(copy)) == local_digest()
    (copy / "extra.py").write_text("")
    assert source_digest(str(copy)) != local_digest()
    # A file moved to another folder is another source, though its bytes are the same.
    (copy / "extra.py").rename(copy / "cli" / "extra.py")
    moved = source_digest(str(copy))
    (copy / "cli" / "extra.py").rename(copy / "extra.py")
    assert moved != source_digest(str(copy))


def test_the_node_finds_an_installed_rtk_but_not_one_in_its_current_folder(
    tmp_path: Path,
) -> None:
    installed = tmp_path / "site"
    copy_of_rtk(installed)
    workdir = tmp_path / "work"
    copy_of_rtk(workdir)
    (workdir / "toolkit" / "errors.py").write_text("# another rtk\n")
    probe = "import json, sys; sys.path.append(sys.argv[1]); " + (
        "exec(open(sys.argv[2]).read().split('\\nif __name__')[0]); print(json.dumps(rtk_source()))"
    )
    facts_file = str(Path(REPO) / "toolkit" / "node" / "facts.py")

    def ask(extra_path: str) -> Any:
        done = subprocess.run(
            # -S: no site-packages, where this venv has rtk installed itself.
            [sys.executable, "-I", "-S", "-c", probe, extra_path, facts_file],
            cwd=workdir,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)

    found = ask(str(installed))
    assert found == {"path": str(installed / "toolkit"), "digest": local_digest()}
    # Only the current folder has one: Ray's workers would not import it.
    assert ask(str(tmp_path / "nowhere")) is None


def test_nodes_differ_names_the_nodes_without_this_source() -> None:
    same = SoftwareFacts(rtk_digest=local_digest())
    assert nodes_differ({"a": same, "b": same}) == []
    assert nodes_differ({"b": SoftwareFacts(), "a": same, "c": SoftwareFacts(rtk_digest="x")}) == [
        "b",
        "c",
    ]


def plan_of(tmp_path: Path) -> Any:
    data = {
        "cluster": "code",
        "nodes": [{"host": "n1", "address": "10.0.0.1"}, {"host": "n2", "address": "10.0.0.2"}],
        "ray": {"auth": "none"},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


def facts(tmp_path: Path, digest: str | None) -> dict[str, Any]:
    data = host_facts(str(tmp_path / "run"))
    data["reach"] = {}
    data["gpus"] = {"available": False, "reason": "no pynvml"}
    data["rtk_source"] = None if digest is None else {"path": "/opt/rtk", "digest": digest}
    parsed: dict[str, Any] = json.loads(json.dumps(data))
    return parsed


def test_preflight_says_whether_every_node_has_this_source(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    here = local_digest()

    def check(n1: str | None, n2: str | None) -> tuple[bool, str]:
        transport = (
            ScriptedTransport()
            .on("n1", r" - ", answer(facts(tmp_path, n1)))
            .on("n2", r" - ", answer(facts(tmp_path, n2)))
        )
        report = run_preflight(plan, transport, str(tmp_path / "run"), alive={"n1", "n2"})
        found = next(c for c in report.checks if c.name == "software.rtk")
        assert found.status == "pass"  # shipping works: never a failure
        return report.same_code, found.measured

    assert check(here, here) == (True, "this rtk's source on all 2 node(s): jobs use theirs")
    same, text = check(here, None)
    assert not same and "1 of 2 node(s) import another rtk or none (n2)" in text
    assert not check("0" * 64, here)[0]


def test_a_job_ships_rtk_unless_told_the_nodes_have_it(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    workload = TrainWorkload(TrainConfig(run_dir="/tmp/run"), "run1")
    shipped = job_request(plan, workload, now_s=0)
    assert shipped.runtime_env["py_modules"] == [package_dir()]
    bare = job_request(plan, workload, now_s=0, ship_code=False)
    assert "py_modules" not in bare.runtime_env
    assert bare.runtime_env["env_vars"] == shipped.runtime_env["env_vars"]
    assert bare.entrypoint == shipped.entrypoint
    assert code_env(False) == {}


def test_what_rtk_up_found_reaches_the_commands_after_it(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    store = StateStore(plan.inventory.name, root=tmp_path / "state")
    remember(store, True)  # nothing brought up from here: nothing kept
    assert store.load() is None
    store.save({"cluster": "code"})
    workload = TrainWorkload(TrainConfig(run_dir="/tmp/run"), "run1")

    def ships() -> bool:
        with Session(plan.inventory, store=store) as session:
            return "py_modules" in session.job_request(workload).runtime_env

    assert ships()
    remember(store, True)
    assert known_same(store.load()) and not ships()
    assert store.load() == {"cluster": "code", STATE_KEY: local_digest()}
    # Another rtk here (an upgrade since rtk up) ships its own.
    store.save({"cluster": "code", STATE_KEY: "0" * 64})
    assert ships()
    remember(store, False)
    assert store.load() == {"cluster": "code"} and ships()
