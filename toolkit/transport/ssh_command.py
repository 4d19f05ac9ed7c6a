"""The system ``ssh`` command line that reaches a node as rtk's SSH transport does.

For what only a real terminal can do (an interactive shell): the same user, port,
key, known_hosts, host key policy, connect timeout and jump host as the inventory
gives ``SshTransport``. The jump host is reached through a ``ProxyCommand`` carrying
the same key and known_hosts, as rtk's own gateway connection uses them (``-J``
would apply neither to the jump host).
"""

from __future__ import annotations

from toolkit.inventory import Node, SshTarget
from toolkit.shell import join


def ssh_argv(node: Node, remote: str, *, tty: bool) -> list[str]:
    """``ssh`` options, ``node`` and the ``remote`` command (one word, run by its shell).

    Args:
        node: The node, with its SSH settings.
        remote: The command line the node's login shell runs.
        tty: Ask for a terminal (``-t``) or refuse one (``-T``).
    """
    ssh = node.ssh
    argv = ["ssh", "-t" if tty else "-T", *_common_options(ssh)]
    if ssh.jump_host:
        argv += ["-o", "ProxyCommand=" + _proxy_command(ssh, ssh.jump_host)]
    argv += _destination(ssh.user, node.address, ssh.port)
    return [*argv, remote]


def _common_options(ssh: SshTarget) -> list[str]:
    """The options the node and its jump host share: keys, host keys, timeout."""
    policy = "accept-new" if ssh.accept_new_host_keys else "yes"
    options = [
        "-o",
        f"StrictHostKeyChecking={policy}",
        "-o",
        f"UserKnownHostsFile={_option_value(ssh.known_hosts)}",
        "-o",
        f"ConnectTimeout={max(1, int(ssh.connect_timeout_s))}",
    ]
    if ssh.key_file:
        options += ["-i", ssh.key_file, "-o", "IdentitiesOnly=yes"]
    return options


def _destination(user: str | None, address: str, port: int) -> list[str]:
    login = ["-l", user] if user else []
    return ["-p", str(port), *login, "--", address]


def _proxy_command(ssh: SshTarget, jump_host: str) -> str:
    """``ssh -W %h:%p`` through ``jump_host`` (``[user@]host[:port]``), run by ssh's shell."""
    user, _, host = jump_host.rpartition("@")
    port = 22
    name, colon, digits = host.rpartition(":")
    if colon and digits.isdigit() and ":" not in name:
        host, port = name, int(digits)
    words = ["ssh", *_common_options(ssh), "-W", "%h:%p"]
    words += _destination(user or None, host, port)
    # ssh expands %-tokens in the whole ProxyCommand: keep every other % literal.
    return join(w if w == "%h:%p" else w.replace("%", "%%") for w in words)


def _option_value(value: str) -> str:
    """A ``-o Key=value`` value: double-quoted when it has blanks (ssh splits at them)."""
    if any(c.isspace() for c in value) or '"' in value:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value
