"""SLURM in the sandbox: real munged, slurmctld and slurmd; batch jobs, steps, scancel."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require, require_sandbox_host, rtk

from toolkit.sandbox import Sandbox, SandboxError, create, destroy
from toolkit.sandbox.config_files import init_script
from toolkit.sandbox.hostcheck import find_tools
from toolkit.sandbox.names import Layout
from toolkit.sandbox.sandbox_json import NodeRecord, SandboxRecord
from toolkit.sandbox.slurm.conf import cgroup_conf, node_init_lines, ports, slurm_conf
from toolkit.sandbox.slurm.daemons import TOOLS, find_slurm_tools

SLURM_PROGRAMS = ("slurmctld", "slurmscriptd", "slurmd", "slurmstepd", "munged")


def slurm_processes(directory: str) -> dict[int, str]:
    """Live SLURM and munge processes of the sandbox in ``directory``: those whose
    command line names it (munged, slurmctld, slurmd), and their descendants."""
    table: dict[int, tuple[int, str, str]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (proc / "comm").read_text().strip()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if stat[0] not in ("Z", "X"):
            table[int(proc.name)] = (int(stat[1]), comm, cmdline)
    found = {
        pid: f"{comm}: {cmdline}"
        for pid, (_, comm, cmdline) in table.items()
        if comm in SLURM_PROGRAMS and f"{directory}/" in cmdline
    }
    grew = True
    while grew:
        children = {
            pid: f"{comm}: {cmdline}"
            for pid, (ppid, comm, cmdline) in table.items()
            if ppid in found and pid not in found
        }
        found.update(children)
        grew = bool(children)
    return found


# --- pure parts: ports, generated text, checks -----------------------------------------


def test_ports_derive_from_the_subnet() -> None:
    assert ports("10.77.20") == (20184, 20185)
    assert ports("10.77.21") == (20186, 20187)
    assert all(20000 <= p < 30000 for s in ("10.0.0", "192.168.255", "172.31.9") for p in ports(s))


def test_slurm_conf_whole_text() -> None:
    layout = Layout.build("t", "10.77.9", 2)
    assert slurm_conf(layout, "ctl", 4) == (
        "# rtk sandbox t: SLURM with slurmctld on this host at 10.77.9.1\n"
        "ClusterName=rtk-t\n"
        "SlurmctldHost=ctl(10.77.9.1)\n"
        "SlurmctldPort=20162\n"
        "SlurmdPort=20163\n"
        "SlurmUser=root\n"
        "SlurmdUser=root\n"
        "AuthType=auth/munge\n"
        "CredType=cred/munge\n"
        "# cred_expire: a step credential's lifetime, and how long a requeued job waits\n"
        "# before it may start again (120 s by default): 20 s for quick requeues.\n"
        "AuthInfo=socket=/tmp/rtk-sb-t/munge/munge.socket,cred_expire=20\n"
        "StateSaveLocation=/tmp/rtk-sb-t/slurm/state\n"
        "SlurmctldPidFile=/tmp/rtk-sb-t/slurm/slurmctld.pid\n"
        "# slurmctld runs in the foreground; its stderr goes to "
        "/tmp/rtk-sb-t/slurm/slurmctld.log.\n"
        "# Each node has its own /run: slurmd's spool, PID file and log stay in the node.\n"
        "SlurmdSpoolDir=/run/slurmd/%n\n"
        "SlurmdPidFile=/run/slurmd/slurmd-%n.pid\n"
        "SlurmdLogFile=/run/slurmd/slurmd-%n.log\n"
        "# Nodes share this machine's CPUs: trust this file, not what slurmd detects.\n"
        "SlurmdParameters=config_overrides\n"
        "# No cgroups per job in namespaces: track processes by parentage.\n"
        "ProctrackType=proctrack/linuxproc\n"
        "TaskPlugin=task/none\n"
        "SelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_CPU\n"
        "MpiDefault=none\n"
        "SwitchType=switch/none\n"
        "# No slurmdbd: sacct does not work; job states come from `scontrol show job`.\n"
        "AccountingStorageType=accounting_storage/none\n"
        "JobAcctGatherType=jobacct_gather/none\n"
        "JobCompType=jobcomp/none\n"
        "# Jobs send no mail (slurmctld logs an error when there is no mail program).\n"
        "MailProg=/bin/true\n"
        "ReturnToService=2\n"
        "MinJobAge=600\n"
        "KillWait=10\n"
        "NodeName=node1 NodeAddr=10.77.9.11 CPUs=4 State=UNKNOWN\n"
        "NodeName=node2 NodeAddr=10.77.9.12 CPUs=4 State=UNKNOWN\n"
        "PartitionName=rtk Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP\n"
    )


def test_cgroup_conf_whole_text() -> None:
    assert cgroup_conf(Layout.build("t", "10.77.9", 1)) == (
        "# rtk sandbox t: slurmd's cgroup plugin; cgroup/v1 because autodetection\n"
        "# fails on a /sys/fs/cgroup that is a tmpfs of v1 hierarchies.\n"
        "CgroupPlugin=cgroup/v1\n"
    )


def test_init_starts_slurmd_after_sshd_only_with_slurm() -> None:
    layout = Layout.build("t", "10.77.9", 2)
    node = layout.nodes[1]
    lines = node_init_lines(layout, node, "/usr/sbin/slurmd")
    assert lines == [
        "# SLURM: the sandbox's config as /etc/slurm; slurmd's files in /run/slurmd.",
        "if [ -d /etc/slurm ]; then mount --bind /tmp/rtk-sb-t/slurm/etc /etc/slurm; fi",
        "mkdir -p /run/slurmd/node2",
        "/usr/sbin/slurmd -f /tmp/rtk-sb-t/slurm/etc/slurm.conf -N node2 || "
        "{ tail -n 5 /run/slurmd/slurmd-node2.log >&2 || true; exit 1; }",
    ]
    plain = init_script(layout, node, "/usr/sbin/sshd")
    assert "slurm" not in plain
    with_slurm = init_script(layout, node, "/usr/sbin/sshd", services=lines)
    sshd_line = next(line for line in plain.splitlines() if "/usr/sbin/sshd -f" in line)
    assert with_slurm == plain.replace(sshd_line, "\n".join([sshd_line, *lines]))


def test_missing_slurm_names_the_packages_and_the_script() -> None:
    with pytest.raises(SandboxError) as e:
        find_slurm_tools(which=lambda *a, **k: None)
    message = str(e.value)
    assert message.startswith("a sandbox with SLURM needs munged, slurmctld, slurmd")
    assert "slurm-wlm and munge (run scripts/system-packages.sh as root)" in message


def test_slurm_env_of_a_sandbox_without_slurm_is_refused() -> None:
    layout = Layout.build("t", "10.77.9", 1)
    record = SandboxRecord("t", "10.77.9", "/tmp/rtk-sb-t", "sshd", "python", 0.0)
    record.nodes = [NodeRecord("node1", "10.77.9.11", "rtk-t-1", "rtv-t-1", 1, 1)]
    with pytest.raises(SandboxError, match=r"runs no SLURM: create it with slurm=True"):
        Sandbox(layout, record).slurm_env()
    record.slurm = True
    assert Sandbox(layout, record).slurm_env() == {
        "SLURM_CONF": "/tmp/rtk-sb-t/slurm/etc/slurm.conf"
    }


def test_help_mentions_slurm() -> None:
    done = rtk("sandbox", "up", "--help")
    assert "--slurm" in done.stdout and "SLURM_CONF=/tmp/rtk-sb-NAME/slurm" in done.stdout


# --- a running sandbox with SLURM -------------------------------------------------------


def require_slurm_host() -> None:
    require_sandbox_host()
    missing = find_tools(tools=TOOLS)[1]
    require(not missing, f"SLURM needs {', '.join(missing)} (scripts/system-packages.sh)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Sandbox]:
    """A 3-node sandbox ``sbslm`` on 10.77.20.0/24 running SLURM."""
    require_slurm_host()
    destroy("sbslm")
    sandbox = create(3, name="sbslm", subnet="10.77.20", slurm=True)
    try:
        yield sandbox
    finally:
        destroy("sbslm")


def slurm(
    sandbox: Sandbox, *argv: str, input_text: str | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a SLURM client command on the host against the sandbox."""
    return subprocess.run(
        argv,
        input=input_text,
        capture_output=True,
        text=True,
        env={**os.environ, **sandbox.slurm_env()},
        timeout=timeout_s,
        check=False,
    )


def submit(sandbox: Sandbox, script: str, *options: str) -> str:
    """sbatch ``script`` (given on stdin) across all nodes; return the job id."""
    done = slurm(
        sandbox,
        "sbatch", "--parsable", "-N3", "--chdir=/tmp", "--output=/tmp/slurm-%j.out", *options,
        input_text=script,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_field(sandbox: Sandbox, job_id: str, key: str) -> str:
    done = slurm(sandbox, "scontrol", "show", "job", "-o", job_id)
    assert done.returncode == 0, done.stderr
    match = re.search(rf"(?:^| ){key}=(\S*)", done.stdout)
    assert match, done.stdout
    return match.group(1)


def wait_for_state(sandbox: Sandbox, job_id: str, states: set[str], timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := job_field(sandbox, job_id, "JobState")) not in states:
        assert time.monotonic() < deadline, f"job {job_id} still {state} after {timeout_s} s"
        time.sleep(0.1)
    return state


def test_sinfo_shows_three_idle_nodes(cluster: Sandbox) -> None:
    done = slurm(cluster, "sinfo", "--noheader", "--Node", "--format=%N %P %T %c")
    assert done.returncode == 0, done.stderr
    cpus = os.cpu_count()
    assert done.stdout.splitlines() == [f"node{i} rtk* idle {cpus}" for i in (1, 2, 3)]


def test_srun_runs_on_every_node(cluster: Sandbox) -> None:
    done = slurm(cluster, "srun", "--chdir=/", "-N3", "hostname")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["node1", "node2", "node3"]


def test_slurm_commands_in_a_node_need_no_slurm_conf(cluster: Sandbox) -> None:
    """Over a real SSH login (no SLURM_CONF), /etc/slurm is the sandbox's config."""
    argv = cluster.ssh_argv("node3", "env | grep -c SLURM_CONF; sinfo -h -N -o %N:%T")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "node1:idle", "node2:idle", "node3:idle"]


def test_a_batch_job_runs_a_step_on_another_node_by_name(cluster: Sandbox) -> None:
    script = (
        "#!/bin/bash\n"
        'echo "batch on $(hostname) SLURM_CONF=$SLURM_CONF"\n'
        "getent hosts node2 | awk '{print $1}'\n"
        "srun --overlap -N1 -n1 -w node2 hostname\n"
        "srun --overlap -N1 -n1 -w node3 printenv SLURM_CONF\n"
    )
    job_id = submit(cluster, script)
    assert wait_for_state(cluster, job_id, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    batch_host = job_field(cluster, job_id, "BatchHost")
    assert batch_host == "node1"
    out = cluster.run_in(batch_host, ["cat", f"/tmp/slurm-{job_id}.out"])
    conf = cluster.slurm_env()["SLURM_CONF"]
    assert out.stdout.splitlines() == [
        f"batch on node1 SLURM_CONF={conf}",
        cluster.node("node2").address,
        "node2",
        conf,
    ], out.stderr


def running_sleeps(cluster: Sandbox, marker: str) -> dict[str, list[str]]:
    """Per node, the ``sleep MARKER`` processes running there."""
    found = {}
    for node in cluster.nodes:
        done = cluster.run_in(node.name, ["pgrep", "-a", "-x", "sleep"])
        found[node.name] = [line for line in done.stdout.splitlines() if line.endswith(marker)]
    return found


def test_scancel_ends_a_running_step_on_every_node(cluster: Sandbox) -> None:
    marker = " 3141"
    job_id = submit(cluster, f"#!/bin/bash\nsrun --overlap -N3 sleep{marker}\n")
    wait_for_state(cluster, job_id, {"RUNNING"})
    deadline = time.monotonic() + 30
    while not all(running_sleeps(cluster, marker).values()):
        assert time.monotonic() < deadline, running_sleeps(cluster, marker)
        time.sleep(0.1)
    began = time.monotonic()
    done = slurm(cluster, "scancel", job_id)
    assert done.returncode == 0, done.stderr
    while any((sleeps := running_sleeps(cluster, marker)).values()):
        assert time.monotonic() - began < 30, f"still running after scancel: {sleeps}"
        time.sleep(0.2)
    assert wait_for_state(cluster, job_id, {"CANCELLED", "COMPLETED", "FAILED"}) == "CANCELLED"


def test_status_reports_slurm(cluster: Sandbox) -> None:
    done = rtk("sandbox", "status", "--name", "sbslm", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(done.stdout)
    assert status["healthy"] and status["slurm"]["healthy"]
    assert set(status["slurm"]["nodes"]) == {"node1", "node2", "node3"}
    text = rtk("sandbox", "status", "--name", "sbslm").stdout
    assert "slurm: up (slurmctld PID" in text


def test_destroy_leaves_no_slurm_process(cluster: Sandbox) -> None:
    directory = str(cluster.directory)
    before = slurm_processes(directory)
    programs = sorted(text.split(":")[0] for text in before.values())
    assert programs == ["munged", "slurmctld", "slurmd", "slurmd", "slurmd", "slurmscriptd"]
    removed = cluster.destroy()
    assert any(line.startswith("slurmctld (PID") for line in removed)
    assert any(line.startswith("munged (PID") for line in removed)
    assert slurm_processes(directory) == {}
    assert [pid for pid in before if Path(f"/proc/{pid}").exists() and not zombie(pid)] == []
    assert not Path(directory).exists()


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


# --- sandboxes of their own: failure and conflicts -------------------------------------


def test_a_failed_create_stops_munged_and_slurmctld() -> None:
    require_slurm_host()
    destroy("sbslmf")
    with pytest.raises(SandboxError, match=r"^node1: its init ended.*Bad configuration option"):
        create(2, name="sbslmf", subnet="10.77.22", slurm=True, sshd_options=["NoSuchOption x"])
    assert slurm_processes("/tmp/rtk-sb-sbslmf") == {}
    assert not Path("/tmp/rtk-sb-sbslmf").exists()


def test_a_taken_slurmctld_port_is_refused_before_anything_is_created() -> None:
    require_slurm_host()
    destroy("sbslmp")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports("10.77.23")[0]))
        taken.listen()
        with pytest.raises(SandboxError, match=r"port 20190, the slurmctld port .* in use"):
            create(1, name="sbslmp", subnet="10.77.23", slurm=True)
    assert not Path("/tmp/rtk-sb-sbslmp").exists()
