"""The variables for Ray's own CLI and SDK: which, how each shell reads them, and Ray's view."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require

from toolkit.cluster.plan import TLS_VARIABLES, build_plan
from toolkit.credentials.client_env import (
    SHELLS,
    ClientEnv,
    TlsFiles,
    detect_shell,
    local_client_env,
    node_session_script,
    ray_client_env,
    render_exports,
)
from toolkit.errors import StateError
from toolkit.inventory import load_inventory
from toolkit.state.cluster_state import ClusterState
from toolkit.state.store import StateStore
from toolkit.state.tls import utc_now, verify_leaf

HOSTILE = (
    ("PLAIN", "10.0.0.1:6379"),
    ("SPACES", "a b  c"),
    ("QUOTES", "it's \"quoted\" ''"),
    ("DOLLAR", "$HOME ${PATH} $(touch pwned) `touch pwned2`"),
    ("BACKSLASH", "C:\\dir\\ \\' \\\\"),
    ("NEWLINE", "line one\nline two; rm -rf x"),
    ("EMPTY", ""),
)


def write_inventory(tmp_path: Path, extra: str = "", temp_dir: Path | None = None) -> Path:
    """A 3-node inventory (head n1 at 10.9.0.1); Ray's temp dir ``temp_dir`` when given."""
    path = tmp_path / "inv.yaml"
    lines = [
        "cluster: c1",
        "nodes:",
        *(f"  - {{host: n{i}, address: 10.9.0.{i}}}" for i in range(1, 4)),
        "ray:",
        f"  temp_dir: {temp_dir}" if temp_dir else "  wait_timeout_s: 60",
        extra,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# Every shell of SHELLS, and sh: each reads the text back (scripts/system-packages.sh
# installs zsh and fish; missing elsewhere, a shell is skipped, and fails CI).
READ_BACK = {"fish": "source {file}"}


@pytest.mark.parametrize("shell", ["sh", *SHELLS])
def test_each_shell_reads_hostile_values_back_exactly_and_runs_nothing(
    shell: str, tmp_path: Path
) -> None:
    require(shutil.which(shell) is not None, f"{shell} is not installed")
    env = ClientEnv(HOSTILE, unset=("GONE",))
    text = render_exports(env, "bash" if shell == "sh" else shell)
    work = tmp_path / "work"
    work.mkdir()
    (work / "exports").write_text(text)
    names = [name for name, _ in HOSTILE] + ["GONE"]
    reader = f"{sys.executable} -c 'import json, os, sys; print(json.dumps([os.environ.get(n) for n in sys.argv[1:]]))' "
    load = READ_BACK.get(shell, 'eval "$(cat {file})"').format(file="exports")
    done = subprocess.run(
        [shell, "-c", f"{load}; {reader}{' '.join(names)}"],
        capture_output=True,
        text=True,
        cwd=work,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GONE": "set before"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [value for _, value in HOSTILE] + [None]
    assert sorted(p.name for p in work.iterdir()) == ["exports"]  # nothing in a value ran


def test_bash_and_zsh_get_the_same_export_lines() -> None:
    env = ClientEnv(HOSTILE, unset=("GONE",))
    text = render_exports(env, "bash")
    assert render_exports(env, "zsh") == text
    lines = text.splitlines()
    assert lines[0] == "unset GONE"
    assert lines[1] == "export PLAIN=10.0.0.1:6379"
    assert lines[2] == "export SPACES='a b  c'"


def test_fish_text_quotes_for_fish_single_quotes() -> None:
    env = ClientEnv((("A", "it's"), ("B", "C:\\x\\'"), ("C", "$HOME (echo hi)\nnext")), ("OLD",))
    assert render_exports(env, "fish") == (
        "set -q OLD; and set -e OLD;\n"
        "set -gx A 'it\\'s';\n"
        "set -gx B 'C:\\\\x\\\\\\'';\n"
        "set -gx C '$HOME (echo hi)\nnext';\n"
    )


def test_an_unknown_shell_is_refused() -> None:
    with pytest.raises(ValueError, match="tcsh"):
        render_exports(ClientEnv((("A", "1"),)), "tcsh")


@pytest.mark.parametrize(
    ("shell_path", "expected"),
    [
        ("/bin/zsh", "zsh"),
        ("/usr/local/bin/fish", "fish"),
        ("/bin/bash", "bash"),
        ("/bin/tcsh", "bash"),
        (None, "bash"),
        ("", "bash"),
    ],
)
def test_the_shell_comes_from_dollar_shell(shell_path: str | None, expected: str) -> None:
    assert detect_shell(shell_path) == expected


def test_token_auth_variables_name_the_file_and_unset_the_token_text(tmp_path: Path) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path)))
    env = ray_client_env(plan, "/keys/token")
    assert env.as_dict() == {
        "RAY_ADDRESS": "10.9.0.1:6379",
        "RAY_API_SERVER_ADDRESS": "http://10.9.0.1:8265",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": "/keys/token",
    }
    # Without ray.tls, another cluster's TLS variables (an earlier eval) go.
    assert env.unset == ("RAY_AUTH_TOKEN", *TLS_VARIABLES)


def test_tls_variables_name_the_node_files_or_the_ones_given(tmp_path: Path) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path, "  tls: true")))
    on_node = ray_client_env(plan, "/keys/token").as_dict()
    assert {k: v for k, v in on_node.items() if "TLS" in k} == {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": plan.paths.tls_cert_file,
        "RAY_TLS_SERVER_KEY": plan.paths.tls_key_file,
        "RAY_TLS_CA_CERT": plan.paths.tls_ca_file,
    }
    here = ray_client_env(plan, "/keys/token", TlsFiles("/s/ca.crt", "/s/c.crt", "/s/c.key"))
    assert here.as_dict()["RAY_TLS_SERVER_CERT"] == "/s/c.crt"
    assert here.unset == ("RAY_AUTH_TOKEN",)


def test_this_machine_gets_its_client_certificate_under_tls(tmp_path: Path) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path, "  tls: true")))
    store = StateStore("c1", tmp_path / "state")
    store.token()
    store.save(ClusterState(cluster="c1"))
    with pytest.raises(StateError, match="uses TLS but this machine has no client certificate"):
        local_client_env(plan, store, None)
    store.tls.client()
    values = local_client_env(plan, store, None).as_dict()
    assert values["RAY_USE_TLS"] == "1"
    assert values["RAY_TLS_SERVER_CERT"] == str(store.tls.client_cert_file.absolute())
    assert values["RAY_TLS_SERVER_KEY"] == str(store.tls.client_key_file.absolute())
    assert values["RAY_TLS_CA_CERT"] == str(store.tls.ca_cert_file.absolute())
    verify_leaf(
        store.tls.ca_cert_file.read_bytes(), store.tls.client_cert_file.read_bytes(), utc_now()
    )


def test_without_auth_or_dashboard_only_what_applies_is_set(tmp_path: Path) -> None:
    extra = "  auth: none\n  include_dashboard: false"
    plan = build_plan(load_inventory(write_inventory(tmp_path, extra)))
    env = ray_client_env(plan, "/keys/token")
    assert env.as_dict() == {"RAY_ADDRESS": "10.9.0.1:6379", "RAY_AUTH_MODE": "disabled"}
    assert env.unset == TLS_VARIABLES


def test_no_state_here_says_to_run_rtk_up_first(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path)
    plan = build_plan(load_inventory(inventory))
    store = StateStore("c1", tmp_path / "state")
    with pytest.raises(StateError) as raised:
        local_client_env(plan, store, str(inventory))
    assert raised.value.exit_code == 6
    assert f"Run `rtk up {inventory}` here first" in str(raised.value)
    assert "'c1' has no state on this machine" in str(raised.value)


def test_state_without_a_token_is_refused_too(tmp_path: Path) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path)))
    store = StateStore("c1", tmp_path / "state")
    store.save(ClusterState(cluster="c1"))
    with pytest.raises(StateError, match="has no token for it"):
        local_client_env(plan, store, None)


def test_this_machine_gets_the_0600_token_file_and_the_inventory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = write_inventory(tmp_path)
    plan = build_plan(load_inventory(inventory))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RTK_STATE_DIR", "state")
    store = StateStore("c1")
    token = store.token()
    store.save(ClusterState(cluster="c1"))
    values = local_client_env(plan, store, "inv.yaml").as_dict()
    token_path = Path(values["RAY_AUTH_TOKEN_PATH"])
    assert token_path.is_absolute() and token_path.read_text() == token
    assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
    assert values["RTK_INVENTORY"] == str(inventory)
    assert values["RTK_STATE_DIR"] == str(tmp_path / "state")
    assert token not in json.dumps(values)


def test_ray_reads_the_cluster_and_the_token_from_the_exported_text(tmp_path: Path) -> None:
    """The installed Ray resolves both addresses and its token loader picks rtk's file,
    even over another token in RAY_AUTH_TOKEN and one in ~/.ray/auth_token."""
    plan = build_plan(load_inventory(write_inventory(tmp_path)))
    store = StateStore("c1", tmp_path / "state")
    token = store.token()
    store.save(ClusterState(cluster="c1"))
    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text("from-home")
    text = render_exports(local_client_env(plan, store, None), "bash")
    probe = (
        "import json\n"
        "from ray._private.services import canonicalize_bootstrap_address_or_die\n"
        "from ray._raylet import AuthenticationTokenLoader\n"
        "from ray.dashboard.utils import get_address_for_submission_client\n"
        "print(json.dumps([canonicalize_bootstrap_address_or_die(None),\n"
        "    get_address_for_submission_client(None),\n"
        "    AuthenticationTokenLoader.instance().get_token_for_http_header()]))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        ["bash", "-c", f'eval "$1"; exec {sys.executable} -c "$2"', "bash", text, probe],
        capture_output=True,
        text=True,
        env={**clean, "HOME": str(tmp_path / "home"), "RAY_AUTH_TOKEN": "another-cluster"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    gcs, api, header = json.loads(done.stdout.strip().splitlines()[-1])
    assert gcs == "10.9.0.1:6379"
    assert api == "http://10.9.0.1:8265"
    assert header == {"authorization": f"Bearer {token}"}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: Ray's temp dir is limited to 48 characters."""
    path = Path(tempfile.mkdtemp(prefix="rtk-ce-"))
    yield path
    shutil.rmtree(path)


def test_a_node_session_loads_the_env_file_then_points_ray_at_the_cluster(
    tmp_path: Path, short_dir: Path
) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path, temp_dir=short_dir)))
    env_file = Path(plan.paths.env_file)
    env_file.parent.mkdir(parents=True)
    env_file.write_text("RTK_NODE='n2'\nNCCL_SOCKET_IFNAME='eth 0'\nRAY_ADDRESS='stale'\n")
    script = node_session_script(
        plan,
        [
            sys.executable,
            "-c",
            "import os; print(os.environ['RTK_NODE'], os.environ['NCCL_SOCKET_IFNAME'], os.environ['RAY_ADDRESS'], os.environ['RAY_AUTH_TOKEN_PATH'], 'RAY_AUTH_TOKEN' in os.environ); raise SystemExit(3)",
        ],
    )
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_AUTH_TOKEN": "wrong"},
        check=False,
    )
    assert done.returncode == 3  # the command's own status
    assert done.stdout.split() == [
        "n2",
        "eth",
        "0",
        "10.9.0.1:6379",
        plan.paths.token_file,
        "False",
    ]
    assert done.stderr == ""


def test_a_node_session_without_the_env_file_says_the_cluster_is_not_up(
    tmp_path: Path, short_dir: Path
) -> None:
    plan = build_plan(load_inventory(write_inventory(tmp_path, temp_dir=short_dir)))
    script = node_session_script(plan, ["echo", "ran"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert done.stdout == "ran\n"
    assert f"no {plan.paths.env_file} on this node: cluster c1 is not up" in done.stderr
