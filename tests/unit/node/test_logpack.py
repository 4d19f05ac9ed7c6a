"""The node's log packer on real files: what it takes, in which order, and what never leaves."""

from __future__ import annotations

import io
import os
import random
import tarfile
import time
from pathlib import Path

import pytest

from toolkit.node import logpack
from toolkit.node.logpack import MaskedSlice, mask_env_text, pack

TOKEN = "f3a9c1d2e4b5a6978877665544332211"


def _write(path: Path, data: bytes | str, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


@pytest.fixture
def temp_dir(tmp_path: Path) -> Path:
    """A node's cluster temp dir as rtk and Ray leave it, with the token in places."""
    root = tmp_path / "rtk-c"
    _write(root / "rtk" / "auth_token", TOKEN + "\n")
    _write(
        root / "rtk" / "node.env",
        "RTK_CLUSTER='c'\nRAY_AUTH_MODE=token\nRAY_AUTH_TOKEN_PATH=/tmp/rtk-c/rtk/auth_token\n"
        "HF_TOKEN='hf_secret_value'\nWANDB_API_KEY=abc123\nNCCL_SOCKET_IFNAME=eth0\n",
    )
    session = root / "session_2024-05-01_12-00-00_000001_42"
    _write(session / "logs" / "raylet.out", f"started\nauth header Bearer {TOKEN} sent\n", 10)
    _write(session / "logs" / "gcs_server.out", "gcs up\n", 20)
    _write(session / "logs" / "old" / "worker-1.err", "old worker\n", 300)
    (root / "session_latest").symlink_to(session.name)
    _write(root / "rtk-telemetry-run1" / "node1.arrows", b"\x00arrows", 5)
    return root


def test_the_token_file_never_goes_and_the_token_is_masked_wherever_it_shows(
    temp_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "logs.tar.gz"
    answer = pack(str(temp_dir), str(out), str(1 << 20))
    members = _members(out)
    assert "rtk/auth_token" not in members
    assert all(TOKEN.encode() not in data for data in members.values())
    raylet = members["ray/session_2024-05-01_12-00-00_000001_42/raylet.out"]
    assert raylet == f"started\nauth header Bearer {'*' * len(TOKEN)} sent\n".encode()
    assert answer["masked_files"] == 1
    assert "rtk/auth_token" in members["COLLECTION.txt"].decode()  # said, not taken
    env = members["rtk/node.env"].decode()
    assert "hf_secret_value" not in env and "abc123" not in env
    assert "HF_TOKEN=<masked by rtk>" in env and "WANDB_API_KEY=<masked by rtk>" in env
    # Paths and plain settings stay as they are: they are what a bug report needs.
    assert "RAY_AUTH_TOKEN_PATH=/tmp/rtk-c/rtk/auth_token" in env
    assert "NCCL_SOCKET_IFNAME=eth0" in env


def test_rtk_files_come_first_then_logs_newest_first_and_session_latest_once(
    temp_dir: Path, tmp_path: Path
) -> None:
    files, tokens = logpack.candidates(str(temp_dir))
    names = [name for _, name, _ in files]
    session = "ray/session_2024-05-01_12-00-00_000001_42"
    assert names == [
        "rtk/node.env",
        f"{session}/raylet.out",
        f"{session}/gcs_server.out",
        f"{session}/old/worker-1.err",
        "telemetry/run1/node1.arrows",
    ]
    assert tokens == ["rtk/auth_token"]


def test_the_cap_keeps_the_newest_whole_cuts_one_to_its_end_and_lists_the_rest(
    tmp_path: Path,
) -> None:
    root = tmp_path / "rtk-c"
    logs = root / "session_1" / "logs"
    _write(logs / "newest.log", b"a" * 100_000, 1)
    _write(logs / "middle.log", b"".join(b"%07d\n" % i for i in range(40_000)), 2)  # 320 kB
    _write(logs / "oldest.log", b"c" * 100_000, 3)
    out = tmp_path / "logs.tar.gz"
    cap = 100_000 + 150_000
    answer = pack(str(root), str(out), str(cap))
    members = _members(out)
    assert members["ray/session_1/newest.log"] == b"a" * 100_000
    middle = members["ray/session_1/middle.log"]
    assert len(middle) == 150_000  # the last 150 kB of it: a log's end is what matters
    assert middle.endswith(b"0039999\n")
    assert "ray/session_1/oldest.log" not in members
    assert answer["file_bytes"] == cap
    assert answer["left_out"] == 1 and answer["left_out_bytes"] == 100_000
    assert answer["cut"] == ["ray/session_1/middle.log: the last 150000 of 320000 bytes"]
    note = members["COLLECTION.txt"].decode()
    assert "ray/session_1/oldest.log  100000 bytes  over the cap" in note


def test_a_budget_too_small_for_a_useful_tail_still_takes_small_files(tmp_path: Path) -> None:
    root = tmp_path / "rtk-c"
    logs = root / "session_1" / "logs"
    _write(logs / "big.log", b"b" * 500_000, 1)
    _write(logs / "small.log", b"s" * 1000, 2)
    out = tmp_path / "logs.tar.gz"
    pack(str(root), str(out), str(logpack.MIN_TAIL_BYTES - 1))
    members = _members(out)
    assert "ray/session_1/big.log" not in members
    assert members["ray/session_1/small.log"] == b"s" * 1000


def test_since_leaves_out_older_files(temp_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "logs.tar.gz"
    answer = pack(str(temp_dir), str(out), str(1 << 20), "60")
    members = _members(out)
    assert "ray/session_2024-05-01_12-00-00_000001_42/old/worker-1.err" not in members
    assert "ray/session_2024-05-01_12-00-00_000001_42/raylet.out" in members
    assert answer["left_out_reasons"] == {
        "the cluster's token, never taken": 1,
        "older than --since": 1,
    }


def test_a_missing_temp_dir_says_the_cluster_may_be_down(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is the cluster up"):
        pack(str(tmp_path / "nope"), str(tmp_path / "x.tar.gz"), "100")


@pytest.mark.parametrize("seed", range(6))
def test_a_masked_slice_equals_masking_the_whole_file_then_slicing(seed: int) -> None:
    # Secrets placed across the reader's chunk boundaries and the slice's edges.
    rng = random.Random(seed)
    secrets = [b"TOKEN-0123456789abcdef", b"short-secret"]
    size = 3 * logpack.CHUNK_BYTES + rng.randrange(1000)
    data = bytearray(rng.randbytes(size))
    spots = [logpack.CHUNK_BYTES - 5, 2 * logpack.CHUNK_BYTES - 20, 17]
    spots += [rng.randrange(size - 30) for _ in range(20)]
    for spot in spots:
        secret = rng.choice(secrets)
        data[spot : spot + len(secret)] = secret
    whole = bytes(data)
    for secret in secrets:
        whole = whole.replace(secret, b"*" * len(secret))
    offset = rng.choice([0, logpack.CHUNK_BYTES - 8, rng.randrange(size // 2)])
    length = rng.randrange(1, size - offset)
    reader = MaskedSlice(io.BytesIO(bytes(data)), offset, length, secrets)
    got = b"".join(iter(lambda: reader.read(16 * 1024), b""))
    assert got == whole[offset : offset + length]
    assert not reader.short


def test_a_file_that_shrank_while_read_is_padded_to_its_announced_size() -> None:
    reader = MaskedSlice(io.BytesIO(b"abc"), 0, 10, [])
    assert reader.read(-1) == b"abc" + b"\0" * 7
    assert reader.short


def test_env_masking_keeps_comments_and_non_secret_lines() -> None:
    text = b"# a comment\nexport DB_PASSWORD='x y'\nPATH=/bin\nMY_TOKEN_FILE=/run/t\n"
    assert mask_env_text(text) == (
        b"# a comment\nexport DB_PASSWORD=<masked by rtk>\nPATH=/bin\nMY_TOKEN_FILE=/run/t\n"
    )
