"""The Ray archive of ``gpu-wheelhouse.sh --with-ray``, round trip on this machine's Python.

The archive is built by the same code (``gpu_acceptance.ray_archive``, fast xz) from the
Ray installed in .venv and unpacked into a fresh venv of the same base interpreter. That
venv sees every package of .venv but Ray (a folder of symlinks to .venv's site-packages
without Ray's own entries, added by a .pth file), so Ray's dependencies import and only
the unpacked Ray can. Its ``bin/ray`` starts a head node, a task runs on it, ``ray stop``
stops it, and no process of it remains; then pip uninstalls that Ray.

``ray stop`` kills every Ray process it can see, not only its own session's: it walks
all processes (psutil) and signals each whose name is a Ray one (raylet, gcs_server,
...); as root, that is every Ray on the machine, other tests' included. Here it runs in
a PID namespace of its own (``unshare --pid --mount-proc``, with tini as its init), where
it sees only the processes started in it; when the namespace's init exits, the kernel
kills whatever is left there, so nothing outlives the test either way. ``ray stop`` also
deletes ``ray_current_cluster`` in Ray's default temp dir (``/tmp/ray``), which other
clusters' drivers read for ``address="auto"``: ``RAY_TMPDIR`` points it at this test's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import pids_mentioning, require

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from gpu_acceptance import ray_archive  # noqa: E402

pytestmark = pytest.mark.ray

# Run in the namespace as its only process besides tini: start, a task, stop, and what
# processes are there after each (PID 1, tini, and this script itself left out).
DRIVER = r"""
import json, os, subprocess, sys, time
ray, python, temp_dir, ports = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
TASK = '''
import json, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
where = ray.remote(lambda: (ray.__file__, sys.executable))
print(json.dumps(ray.get(where.remote())))
'''

def others():
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, os.getpid()):
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if state != "Z":
            found[entry] = cmdline
    return found

def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    return {"rc": done.returncode, "out": (done.stdout + done.stderr)[-3000:], "stdout": done.stdout}

result = {"start": run([
    ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={ports['gcs']}",
    "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={temp_dir}",
    "--disable-usage-stats",
    f"--node-manager-port={ports['node_manager']}",
    f"--object-manager-port={ports['object_manager']}",
    f"--runtime-env-agent-port={ports['runtime_env_agent']}",
    f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
    f"--dashboard-agent-listen-port={ports['agent_listen']}",
    f"--metrics-export-port={ports['metrics']}",
    f"--ray-client-server-port={ports['client']}",
    f"--min-worker-port={ports['min_worker']}", f"--max-worker-port={ports['max_worker']}",
])}
result["running"] = others()
result["task"] = run([python, "-c", TASK, f"127.0.0.1:{ports['gcs']}"])
result["stop"] = run([ray, "stop"])
for _ in range(100):  # what ray stop signalled may take a moment to be reaped
    if not others():
        break
    time.sleep(0.1)
result["left"] = others()
print(json.dumps(result))
"""


def free_ports(names: list[str], worker_range: int = 40) -> dict[str, int]:
    """A free port for each name (held open together, so all differ) and a worker range."""
    held = []
    try:
        for _ in names:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        ports = {name: s.getsockname()[1] for name, s in zip(names, held, strict=True)}
        for start in range(21000 + os.getpid() % 20000, 65000 - worker_range, worker_range):
            block = range(start, start + worker_range)
            if set(block) & set(ports.values()):
                continue
            probes = []
            try:
                for port in block:
                    p = socket.socket()
                    probes.append(p)
                    p.bind(("127.0.0.1", port))
            except OSError:
                continue
            finally:
                for p in probes:
                    p.close()
            return {**ports, "min_worker": start, "max_worker": start + worker_range - 1}
        raise AssertionError("no free block of worker ports")
    finally:
        for s in held:
            s.close()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """.venv's Ray packed, unpacked into a fresh venv that sees .venv's packages but Ray."""
    try:
        dist = importlib.metadata.distribution("ray")
    except importlib.metadata.PackageNotFoundError:
        require(False, "this Python has no Ray to pack (scripts/test.sh installs it)")
    root = tmp_path_factory.mktemp("ray-archive")
    source_site = Path(str(dist.locate_file("")))
    archive = root / "ray.rtk.tar.xz"
    manifest = ray_archive.build(source_site, archive, level=0)

    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    paths = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    site = Path(paths.stdout.strip())
    # Ray's own top-level entries, from its RECORD: ray/ and ray-V.dist-info/.
    ray_tops = {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}
    assert ray_tops == {"ray", f"ray-{manifest.version}.dist-info"}, ray_tops
    view = root / "venv-without-ray"
    view.mkdir()
    for entry in source_site.iterdir():
        if entry.name not in ray_tops:
            (view / entry.name).symlink_to(entry)
    # addsitedir, not a plain path line: .pth files there (rtk's editable install) count.
    (site / "_rtk_test_view.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    before = subprocess.run([str(python), "-c", "import ray"], capture_output=True, text=True)
    assert before.returncode != 0 and "No module named 'ray'" in before.stderr

    installed = ray_archive.install(archive, site, root / "venv" / "bin", str(python))
    yield {"python": python, "site": site, "bin": root / "venv" / "bin", "root": root,
           "manifest": manifest, "installed": installed, "version": dist.version}  # fmt: skip


def in_fresh(fresh: dict[str, Any], code: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(fresh["python"]), "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_fresh_venv_runs_the_unpacked_ray_with_venvs_other_packages(
    fresh: dict[str, Any],
) -> None:
    facts = in_fresh(
        fresh,
        "import importlib.metadata as m, json, os, sys, ray, pydantic, aiohttp\n"
        "print(json.dumps({'version': m.version('ray'), 'file': ray.__file__,"
        " 'rays': [p for p in sys.path if os.path.isdir(os.path.join(p, 'ray'))],"
        " 'pydantic': pydantic.__file__}))",
    )
    site = str(fresh["site"])
    assert facts["version"] == fresh["version"] == fresh["manifest"].version
    assert facts["file"] == f"{site}/ray/__init__.py"
    assert facts["rays"] == [site], "only the unpacked Ray is on the path"
    assert "venv-without-ray" in facts["pydantic"]
    assert not (fresh["site"] / "ray" / "jars").exists()
    assert [left.prefix for left in fresh["manifest"].left_out] == ["ray/jars/"]
    assert [p.name for p in fresh["installed"].scripts] == ["ray", "serve", "tune"]
    pip = [sys.executable, "-m", "pip", "--python", str(fresh["python"]), "show", "ray"]
    shown = subprocess.run(pip, capture_output=True, text=True, timeout=120)
    assert f"Location: {site}" in shown.stdout, shown.stdout + shown.stderr


def test_its_ray_starts_a_head_runs_a_task_and_stops_leaving_no_process(
    fresh: dict[str, Any],
) -> None:
    tools = {tool: shutil.which(tool) for tool in ("unshare", "tini")}
    require(all(tools.values()), "unshare (util-linux) and tini: scripts/system-packages.sh")
    probe = subprocess.run(
        [tools["unshare"], "--pid", "--fork", "--mount-proc", "true"], capture_output=True
    )
    require(probe.returncode == 0, "a PID namespace (unshare --pid, as root) keeps ray stop in")
    # A short private root: Ray's socket paths must stay under 107 bytes.
    temp_root = Path(tempfile.mkdtemp(prefix="rtk-ra-"))
    try:
        ports = free_ports(
            ["gcs", "node_manager", "object_manager", "runtime_env_agent", "agent_grpc",
             "agent_listen", "metrics", "client"]
        )  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.pop("PYTHONPATH", None)
        env.update(RAY_TMPDIR=str(temp_root), RAY_AUTH_MODE="disabled")
        argv = [
            tools["unshare"], "--pid", "--fork", "--mount-proc", "--kill-child",
            tools["tini"], "-s", "--",
            sys.executable, "-c", DRIVER, str(fresh["bin"] / "ray"), str(fresh["python"]),
            str(temp_root / "session"), json.dumps(ports),
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=420)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        left_outside = pids_mentioning(str(temp_root))
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)

    assert result["start"]["rc"] == 0, result["start"]["out"]
    running = " ".join(result["running"].values())
    site = str(fresh["site"])
    assert f"{site}/ray/core/src/ray/raylet/raylet" in running, running
    assert f"{site}/ray/core/src/ray/gcs/gcs_server" in running, running
    assert result["task"]["rc"] == 0, result["task"]["out"]
    ray_file, executable = json.loads(result["task"]["stdout"].strip().splitlines()[-1])
    assert ray_file == f"{site}/ray/__init__.py"
    assert executable == str(fresh["python"])
    assert result["stop"]["rc"] == 0, result["stop"]["out"]
    assert result["left"] == {}, f"ray stop left processes: {result['left']}"
    assert left_outside == []

    # pip takes it all back: RECORD lists every file and script the archive put there.
    pip = [sys.executable, "-m", "pip", "--python", str(fresh["python"]), "uninstall", "-y", "ray"]
    gone = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert gone.returncode == 0, gone.stderr
    assert not (fresh["site"] / "ray").exists()
    assert not list(fresh["site"].glob("ray-*.dist-info"))
    assert not (fresh["bin"] / "ray").exists()
