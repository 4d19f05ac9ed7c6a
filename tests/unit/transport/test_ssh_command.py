"""The system ssh command line for a node, read back by the real ssh (``ssh -G``)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from toolkit.inventory import Node, load_inventory
from toolkit.transport.ssh_command import ssh_argv


def node_from(tmp_path: Path, ssh_lines: list[str]) -> Node:
    """The head of a one-node inventory whose defaults.ssh has ``ssh_lines``."""
    path = tmp_path / "inv.yaml"
    ssh = "".join(f"    {line}\n" for line in ssh_lines)
    path.write_text(
        f"cluster: c1\ndefaults:\n  ssh:\n{ssh}nodes:\n  - host: n1\n    address: 10.9.0.1\n"
    )
    return load_inventory(path).head


def resolved(argv: list[str]) -> dict[str, list[str]]:
    """What the real ssh makes of ``argv`` (``ssh -G``: the configuration, no connection)."""
    assert argv[0] == "ssh"
    done = subprocess.run(
        ["ssh", "-G", *argv[1:]], capture_output=True, text=True, check=True, env={}
    )
    config: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        config.setdefault(key.lower(), []).append(value)
    return config


def test_the_inventory_settings_reach_ssh(tmp_path: Path) -> None:
    keys = tmp_path / "my keys"
    keys.mkdir()
    (keys / "id key").write_text("not a real key\n")
    node = node_from(
        tmp_path,
        [
            "user: alice",
            "port: 2222",
            'key: "my keys/id key"',
            'known_hosts: "my keys/known hosts"',
            "connect_timeout_s: 7.5",
        ],
    )
    argv = ssh_argv(node, "bash -c 'echo hi'", tty=True)
    assert argv[1] == "-t"
    assert argv[-2:] == ["10.9.0.1", "bash -c 'echo hi'"]
    config = resolved(argv)
    assert config["user"] == ["alice"]
    assert config["hostname"] == ["10.9.0.1"]
    assert config["port"] == ["2222"]
    assert config["identityfile"] == [str(keys / "id key")]
    assert config["identitiesonly"] == ["yes"]
    assert config["userknownhostsfile"] == [str(keys / "known hosts")]
    assert config["stricthostkeychecking"] == ["true"]
    assert config["connecttimeout"] == ["7"]
    assert config["requesttty"] == ["true"]
    assert "proxycommand" not in config


def test_defaults_and_accept_new_host_keys(tmp_path: Path) -> None:
    node = node_from(tmp_path, ["accept_new_host_keys: true"])
    argv = ssh_argv(node, "true", tty=False)
    assert argv[1] == "-T"
    assert "-i" not in argv
    config = resolved(argv)
    assert config["port"] == ["22"]
    assert config["stricthostkeychecking"] == ["accept-new"]
    assert config["requesttty"] == ["false"]


def test_the_jump_host_gets_the_same_key_and_known_hosts(tmp_path: Path) -> None:
    (tmp_path / "k%1").write_text("not a real key\n")
    node = node_from(
        tmp_path,
        ["user: alice", 'key: "k%1"', "jump_host: bob@bastion.example:2200"],
    )
    config = resolved(ssh_argv(node, "true", tty=False))
    (proxy,) = config["proxycommand"]
    words = shlex.split(proxy)
    assert words[0] == "ssh"
    # ssh expands %-tokens in ProxyCommand: the key's own % is doubled, %h:%p kept.
    assert words[words.index("-i") + 1] == str(tmp_path / "k%%1")
    assert f"UserKnownHostsFile={node.ssh.known_hosts}" in words
    assert words[words.index("-W") + 1] == "%h:%p"
    assert words[-6:] == ["-p", "2200", "-l", "bob", "--", "bastion.example"]
    assert config["user"] == ["alice"]  # the node's own user, not the jump host's


def test_a_jump_host_without_user_or_port(tmp_path: Path) -> None:
    node = node_from(tmp_path, ["jump_host: bastion"])
    (proxy,) = resolved(ssh_argv(node, "true", tty=False))["proxycommand"]
    assert shlex.split(proxy)[-4:] == ["-p", "22", "--", "bastion"]
