"""The Ray files ``facts.py`` sends back for preflight's ``ray.auth``/``ray.tls``.

Real files on disk, read by the script's own function and by the script run as the
host runs it (``python - RUN_DIR DCGM_LEVEL ENV_FILE``): the env file always, the
certificate and CA it names only where it turns TLS on, the key never.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from toolkit.node.facts import RAY_FILE_MAX_CHARS, ray_files
from toolkit.nodeinfo import FACTS
from toolkit.shell import parse_env_file


def env_with_tls(tmp_path: Path, tls: str) -> Path:
    for name in ("ca.crt", "node.crt", "node.key"):
        (tmp_path / name).write_text(f"-----BEGIN {name}-----\n")
    env = tmp_path / "ray.env"
    env.write_text(
        "# rtk's env file\n"
        "RAY_AUTH_MODE='token'\n"
        f"RAY_USE_TLS='{tls}'\n"
        f"RAY_TLS_SERVER_CERT='{tmp_path / 'node.crt'}'\n"
        f"RAY_TLS_SERVER_KEY='{tmp_path / 'node.key'}'\n"
        f"RAY_TLS_CA_CERT='{tmp_path / 'ca.crt'}'\n"
        "PATH='/opt/x'\"${PATH:+:$PATH}\"\n"
    )
    return env


def test_tls_on_sends_env_certificate_and_ca_never_the_key(tmp_path: Path) -> None:
    env = env_with_tls(tmp_path, "1")
    found = ray_files(str(env))
    assert set(found) == {"env", "cert", "ca"}
    assert found["cert"] == "-----BEGIN node.crt-----\n"
    assert found["ca"] == "-----BEGIN ca.crt-----\n"
    assert "node.key-----" not in json.dumps(found)
    # The host reads the env text back with the same rules.
    assert parse_env_file(found["env"])["RAY_USE_TLS"] == "1"


def test_tls_off_sends_the_env_file_alone_and_no_env_file_sends_nothing(
    tmp_path: Path,
) -> None:
    assert set(ray_files(str(env_with_tls(tmp_path, "0")))) == {"env"}
    assert ray_files(str(tmp_path / "absent.env")) == {}


def test_a_named_certificate_that_is_missing_is_left_out(tmp_path: Path) -> None:
    env = env_with_tls(tmp_path, "true")
    (tmp_path / "ca.crt").unlink()
    assert set(ray_files(str(env))) == {"env", "cert"}


def test_a_huge_file_is_cut_at_the_limit(tmp_path: Path) -> None:
    env = tmp_path / "ray.env"
    env.write_text("X='" + "y" * (RAY_FILE_MAX_CHARS * 2) + "'\n")
    assert len(ray_files(str(env))["env"]) == RAY_FILE_MAX_CHARS


def test_the_script_as_the_host_runs_it_answers_ray_files(tmp_path: Path) -> None:
    env = env_with_tls(tmp_path, "1")
    done = subprocess.run(
        [sys.executable, "-", str(tmp_path), "0", str(env)],
        input=FACTS.source(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert set(answer["ray_files"]) == {"env", "cert", "ca"}
    without = subprocess.run(
        [sys.executable, "-", str(tmp_path), "0"],
        input=FACTS.source(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "ray_files" not in json.loads(without.stdout)
