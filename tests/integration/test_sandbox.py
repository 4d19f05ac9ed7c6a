"""The sandbox: real namespaces, real sshd, real SSH; and that it leaves nothing behind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import REPO, require_sandbox_host, rtk

from toolkit.sandbox import Sandbox, SandboxError, check_host, create, destroy
from toolkit.sandbox.config_files import sshd_config
from toolkit.sandbox.names import Layout, validate_name, validate_subnet
from toolkit.sandbox.network import list_links, list_netns


def ssh(
    address: str, key: Path, known_hosts: Path, *remote: str
) -> subprocess.CompletedProcess[str]:
    """Log in the way the brief for the sandbox spells it out, nothing else."""
    argv = [
        "ssh", "-F", "none",
        "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "ConnectTimeout=5",
        "-i", str(key),
        f"root@{address}",
        *remote,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def live_processes_mentioning(text: str) -> list[str]:
    """Command lines of live (not zombie) processes that contain ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state not in ("Z", "X") and text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def assert_nothing_left(name: str) -> None:
    assert [ns for ns in list_netns() if ns.startswith(f"rtk-{name}-")] == []
    assert [link for link in list_links() if name in link] == []
    assert not Path(f"/tmp/rtk-sb-{name}").exists()
    assert live_processes_mentioning(f"/tmp/rtk-sb-{name}/") == []
    ip_netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert f"rtk-{name}-" not in ip_netns.stdout


# --- pure parts: names, checks, generated text --------------------------------------


def test_names_and_subnets_are_checked() -> None:
    assert validate_name("sb3") == "sb3"
    for bad in ("", "toolongname", "Caps", "-x", "a b", "a/b"):
        with pytest.raises(SandboxError, match="not allowed"):
            validate_name(bad)
    assert validate_subnet("10.77.03") == "10.77.3"
    with pytest.raises(SandboxError, match="not private"):
        validate_subnet("8.8.8")
    with pytest.raises(SandboxError, match="three octets"):
        validate_subnet("10.77")
    with pytest.raises(SandboxError, match="1 to 64 nodes"):
        Layout.build("x", "10.77.9", 0)


def test_layout_names_fit_linux_interface_names() -> None:
    layout = Layout.build("abcdefgh", "10.77.9", 64)
    names = [layout.bridge, *(n.veth for n in layout.nodes)]
    assert max(len(n) for n in names) <= 15
    assert layout.nodes[0].address == "10.77.9.11" and layout.nodes[-1].address == "10.77.9.74"
    assert layout.nodes[2].netns == "rtk-abcdefgh-3" and layout.nodes[2].name == "node3"


def test_sshd_config_whole_text() -> None:
    layout = Layout.build("t", "10.77.9", 2)
    assert sshd_config(layout, layout.nodes[1], ["LogLevel DEBUG"]) == (
        "# rtk sandbox t: sshd of node2\n"
        "HostKey /tmp/rtk-sb-t/hostkey2\n"
        "ListenAddress 10.77.9.12\n"
        "Port 22\n"
        "PermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "AuthorizedKeysFile /tmp/rtk-sb-t/authorized_keys\n"
        "PidFile /run/sshd.pid\n"
        "MaxStartups 100:30:200\n"
        "PrintMotd no\n"
        "PrintLastLog no\n"
        "Subsystem sftp internal-sftp\n"
        "LogLevel DEBUG\n"
    )


def test_refuses_when_not_root_or_not_linux_or_tools_missing() -> None:
    with pytest.raises(
        SandboxError, match=r"^rtk sandbox needs root: it creates network namespaces"
    ):
        check_host(euid=65534, system="Linux")
    with pytest.raises(SandboxError, match="needs Linux"):
        check_host(euid=0, system="Darwin")
    with pytest.raises(SandboxError) as e:
        check_host(euid=0, system="Linux", which=lambda *a, **k: None)
    assert "tini" in str(e.value) and "openssh-server" in str(e.value)
    assert "apt-get install" in str(e.value)
    assert "\n" not in str(e.value)


def test_up_dry_run_prints_the_layout_and_creates_nothing() -> None:
    done = rtk(
        "sandbox", "up", "--nodes", "2", "--name", "sbdry", "--subnet", "10.77.9", "--dry-run"
    )
    assert done.returncode == 0, done.stderr
    assert "[node2] 10.77.9.12: netns rtk-sbdry-2, veth rtv-sbdry-2 into rtkb-sbdry" in done.stdout
    assert not Path("/tmp/rtk-sb-sbdry").exists()
    bad = rtk("sandbox", "up", "--nodes", "2", "--name", "BAD NAME", "--dry-run")
    assert bad.returncode != 0 and "sandbox name 'BAD NAME' is not allowed" in bad.stderr


def test_cli_errors_are_one_line() -> None:
    done = rtk("sandbox", "up", "--nodes", "2", "--name", "Not_Allowed!")
    assert done.returncode == 7
    assert done.stderr.startswith("rtk: sandbox name 'Not_Allowed!' is not allowed")
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_help_teaches() -> None:
    done = rtk("sandbox", "up", "--help")
    assert done.returncode == 0
    for words in ("Needs root", "rtkb-NAME", "rtk sandbox down", 'rtk up "$inv"'):
        assert words in done.stdout
    assert "\n    inv=$(rtk sandbox up --nodes 3)" in done.stdout  # example lines not rewrapped


# --- a running sandbox ----------------------------------------------------------------


def test_nodes_have_distinct_hostnames_and_addresses(sandbox3: Sandbox) -> None:
    seen = []
    for node in sandbox3.nodes:
        name = sandbox3.run_in(node.name, ["hostname"], 10).stdout.strip()
        addr = sandbox3.run_in(node.name, ["ip", "-4", "-o", "addr", "show", "eth0"], 10).stdout
        assert name == node.name and f" {node.address}/24 " in addr
        seen.append((name, node.address))
    assert seen == [("node1", "10.77.3.11"), ("node2", "10.77.3.12"), ("node3", "10.77.3.13")]
    hosts = sandbox3.run_in("node2", ["getent", "hosts", "node3"], 10).stdout
    assert hosts.split() == ["10.77.3.13", "node3"]
    assert "node3" not in Path("/etc/hosts").read_text()  # the host's own is untouched


def test_each_node_has_its_own_pid_namespace(sandbox3: Sandbox) -> None:
    for node in sandbox3.nodes:
        done = sandbox3.run_in(node.name, ["ps", "-e", "-o", "pid=,args="], 10)
        lines = done.stdout.strip().splitlines()
        pid1, args = lines[0].split(None, 1)
        assert pid1 == "1" and args.endswith(
            f"tini -s -- bash /tmp/rtk-sb-sb3/init{node.name[4:]}.sh"
        )
        assert len(lines) < 40, lines  # tini, sleep, sshd, ps (and Ray, when a test runs it)
        assert "pytest" not in done.stdout


def test_each_node_has_its_own_tmp_and_shm(sandbox3: Sandbox) -> None:
    marker = f"rtk-test-{uuid.uuid4().hex}"
    for directory in ("/tmp", "/dev/shm", "/tmp/ray"):
        path = f"{directory}/{marker}"
        made = sandbox3.run_in("node1", ["sh", "-c", f"mkdir -p {directory} && touch {path}"], 10)
        assert made.returncode == 0, made.stderr
        try:
            assert sandbox3.run_in("node1", ["test", "-e", path], 10).returncode == 0
            assert sandbox3.run_in("node2", ["test", "-e", path], 10).returncode == 1
            assert not Path(path).exists()
        finally:
            sandbox3.run_in("node1", ["rm", "-f", path], 10)


def test_ssh_with_the_generated_key_reaches_every_node(sandbox3: Sandbox) -> None:
    for node in sandbox3.nodes:
        done = ssh(node.address, sandbox3.key_path, sandbox3.known_hosts_path, "hostname")
        assert (done.returncode, done.stdout.strip()) == (0, node.name), done.stderr


def test_a_wrong_known_hosts_is_refused(sandbox3: Sandbox, tmp_path: Path) -> None:
    lines = sandbox3.known_hosts_path.read_text().splitlines()
    node1_ip, node2_key = lines[0].split()[0], lines[1].split(None, 1)[1]
    swapped = tmp_path / "known_hosts"
    swapped.write_text(f"{node1_ip} {node2_key}\n")
    done = ssh(node1_ip, sandbox3.key_path, swapped, "hostname")
    assert done.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in done.stderr
    empty = tmp_path / "empty"
    empty.write_text("")
    done = ssh(node1_ip, sandbox3.key_path, empty, "hostname")
    assert done.returncode == 255 and "Host key verification failed" in done.stderr


def test_node1_reaches_node2_sshd_over_tcp(sandbox3: Sandbox) -> None:
    script = "exec 3<>/dev/tcp/node2/22 && head -c 8 <&3"
    done = sandbox3.run_in("node1", ["timeout", "5", "bash", "-c", script], 10)
    assert done.stdout == "SSH-2.0-", done.stderr


def test_stop_sshd_makes_ssh_fail_and_start_sshd_restores_it(sandbox3: Sandbox) -> None:
    node = sandbox3.node("node3")
    sandbox3.stop_sshd("node3")
    try:
        done = ssh(node.address, sandbox3.key_path, sandbox3.known_hosts_path, "true")
        assert done.returncode == 255 and "Connection refused" in done.stderr
        assert rtk("sandbox", "status", "--name", "sb3").returncode == 1
    finally:
        sandbox3.start_sshd("node3")
    done = ssh(node.address, sandbox3.key_path, sandbox3.known_hosts_path, "hostname")
    assert done.stdout.strip() == "node3"


def test_inventory_passes_rtk_inventory_check(sandbox3: Sandbox) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "inventory", "check", "--json", str(sandbox3.inventory_path)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    inv = json.loads(done.stdout)
    assert inv["cluster"] == "sb3" and inv["transport"] == "ssh"
    assert [(n["name"], n["address"], n["user"], n["port"]) for n in inv["nodes"]] == [
        (f"node{i}", f"10.77.3.1{i}", "root", 22) for i in (1, 2, 3)
    ]
    assert {n["python"] for n in inv["nodes"]} == {sys.executable}
    text = sandbox3.inventory_path.read_text()
    assert f'key: "{sandbox3.key_path}"' in text
    assert f'known_hosts: "{sandbox3.known_hosts_path}"' in text
    assert "temp_dir" not in text


def test_load_reattaches_and_status_reports_healthy(sandbox3: Sandbox) -> None:
    again = Sandbox.load("sb3")
    assert again.nodes == sandbox3.nodes
    record = json.loads((sandbox3.directory / "sandbox.json").read_text())
    assert record["bridge"] == "rtkb-sb3"
    assert [n["netns"] for n in record["nodes"]] == ["rtk-sb3-1", "rtk-sb3-2", "rtk-sb3-3"]
    done = rtk("sandbox", "status", "--name", "sb3", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["healthy"] and [n["init_pid"] for n in status["nodes"]] == [
        n.init_pid for n in sandbox3.nodes
    ]


def test_a_second_sandbox_of_the_same_name_is_refused_and_the_first_survives(
    sandbox3: Sandbox,
) -> None:
    with pytest.raises(SandboxError, match=r"already exists .*`rtk sandbox down --name sb3`"):
        create(2, name="sb3", subnet="10.77.6")
    with pytest.raises(SandboxError, match="subnet 10.77.3.0/24 is already in use"):
        create(2, name="sbother", subnet="10.77.3")
    assert Sandbox.load("sb3").nodes == sandbox3.nodes


# --- sandboxes of their own: failure, leftovers, the CLI ------------------------------


def test_a_failed_create_removes_everything_it_created() -> None:
    require_sandbox_host()
    destroy("sbfail")
    with pytest.raises(SandboxError, match=r"^node1: its init ended.*Bad configuration option"):
        create(2, name="sbfail", subnet="10.77.5", sshd_options=["NoSuchOption yes"])
    assert_nothing_left("sbfail")


def test_destroy_finds_leftovers_by_name_without_a_record() -> None:
    require_sandbox_host()
    destroy("sbpart")
    subprocess.run(["ip", "netns", "add", "rtk-sbpart-1"], check=True)
    subprocess.run(["ip", "link", "add", "rtkb-sbpart", "type", "bridge"], check=True)
    subprocess.run(
        [
            "ip",
            "link",
            "add",
            "rtv-sbpart-1",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            "rtk-sbpart-1",
        ],
        check=True,
    )
    removed = destroy("sbpart")
    assert set(removed) == {"netns rtk-sbpart-1", "interface rtkb-sbpart", "interface rtv-sbpart-1"}
    assert_nothing_left("sbpart")
    assert destroy("sbpart") == []


def test_cli_up_status_down_leaves_nothing_behind() -> None:
    require_sandbox_host()
    destroy("sbcli")
    try:
        up = rtk(
            "sandbox", "up", "--nodes", "2", "--name", "sbcli", "--subnet", "10.77.4", timeout=120
        )
        assert up.returncode == 0, up.stderr
        assert up.stdout == "/tmp/rtk-sb-sbcli/inventory.yaml\n"
        assert re.search(r"\bnode2 +ssh root@10\.77\.4\.12 works", up.stderr), up.stderr
        assert "rtk up /tmp/rtk-sb-sbcli/inventory.yaml" in up.stderr
        status = rtk("sandbox", "status", "--name", "sbcli")
        assert status.returncode == 0 and "healthy" in status.stdout
        assert live_processes_mentioning("/tmp/rtk-sb-sbcli/") != []
        planned = rtk("sandbox", "down", "--name", "sbcli", "--dry-run")
        assert planned.returncode == 0, planned.stderr
        assert "remove netns rtk-sbcli-2" in planned.stdout
        assert "remove bridge rtkb-sbcli" in planned.stdout
        assert rtk("sandbox", "status", "--name", "sbcli").returncode == 0  # still up
        down = rtk("sandbox", "down", "--name", "sbcli")
        assert (down.returncode, down.stdout) == (0, "sandbox sbcli removed\n"), down.stderr
        assert "removed netns rtk-sbcli-2" in down.stderr
    finally:
        destroy("sbcli")
    assert_nothing_left("sbcli")
    again = rtk("sandbox", "down", "--name", "sbcli")
    assert (again.returncode, again.stdout) == (0, "sandbox sbcli: nothing to remove\n")


def test_a_virtualenv_under_tmp_stays_visible_in_the_nodes(tmp_path: Path) -> None:
    require_sandbox_host()
    venv = Path(f"/tmp/rtk-venv-{uuid.uuid4().hex[:6]}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    destroy("sbvenv")
    try:
        sandbox = create(2, name="sbvenv", subnet="10.77.6", python=str(venv / "bin" / "python"))
        try:
            for node in sandbox.nodes:
                done = subprocess.run(
                    sandbox.ssh_argv(
                        node.name, f"{venv}/bin/python", "-c", "'import sys; print(sys.prefix)'"
                    ),
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                assert done.stdout.strip() == str(venv), done.stderr
                # Read-only there, and the node's own /tmp is still private.
                touch = sandbox.run_in(node.name, ["touch", f"{venv}/x"], 30)
                assert touch.returncode != 0
                assert not (venv / "x").exists()
        finally:
            sandbox.destroy()
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=False)
