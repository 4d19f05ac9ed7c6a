"""scripts/gpu_acceptance/ray_archive: Ray packed for an offline GPU machine, on a small Ray.

A stand-in ``ray`` wheel (a package, a jar, an executable, a console script, a
dependency) goes through the same code as the real one: ``build`` from the wheel and
from an installed copy, ``install`` into a fresh venv that ``pip`` then uninstalls,
refusals (another Python, Ray already there, a path out of site-packages), the
``Installer`` path of ``gpu-acceptance.sh --wheelhouse DIR --offline`` with its
``ray-deps/``, and the wheelhouse's choice of dependency wheels and its size budget.
The real Ray (from .venv, started and stopped) is tests/integration/test_ray_archive_roundtrip.py.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

from gpu_acceptance import install, ray_archive  # noqa: E402
from gpu_acceptance.ray_archive import unpack, wheelhouse  # noqa: E402
from gpu_acceptance.ray_archive.manifest import MANIFEST, record_hash  # noqa: E402

VERSION = "9.9.0"
JAR = b"\x50\x4b" + b"j" * 5000
RAY_INIT = (
    "import rtk_fake_dep\n"
    f"__version__ = {VERSION!r}\n"
)  # fmt: skip
RAY_SCRIPTS = (
    "import sys\n"
    "import ray\n\n\n"
    "def main():\n"
    "    print('ray, version', ray.__version__, ray.__file__)\n"
    "    return 0\n"
)  # fmt: skip
ENTRY_POINTS = "[console_scripts]\nray = ray.scripts.scripts:main\nserve = ray.serve:cli\n"


def make_wheel(
    directory: Path,
    name: str = "ray",
    version: str = VERSION,
    tag: str = "py3-none-any",
    files: dict[str, bytes] | None = None,
    requires: tuple[str, ...] = (),
) -> Path:
    """A wheel as pip would find it: its files, a dist-info with METADATA, WHEEL, RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    content = dict(files or {})
    content[f"{dist_info}/METADATA"] = metadata.encode()
    content[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    )
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, d in content.items()]
    content[f"{dist_info}/RECORD"] = ("\n".join([*rows, f"{dist_info}/RECORD,,"]) + "\n").encode()
    path = directory / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in content.items():
            info = zipfile.ZipInfo(member, (2024, 1, 2, 3, 4, 5))
            info.external_attr = (0o100755 if member.endswith("/raylet") else 0o100644) << 16
            zf.writestr(info, data)
    return path


def fake_ray(directory: Path, tag: str = "py3-none-any") -> Path:
    return make_wheel(
        directory,
        tag=tag,
        files={
            "ray/__init__.py": RAY_INIT.encode(),
            "ray/scripts/__init__.py": b"",
            "ray/scripts/scripts.py": RAY_SCRIPTS.encode(),
            "ray/serve.py": b"def cli():\n    print('serve')\n",
            "ray/core/raylet": b"#!/bin/sh\necho raylet\n",
            "ray/jars/ray_dist.jar": JAR,
            f"ray-{VERSION}.dist-info/entry_points.txt": ENTRY_POINTS.encode(),
        },
    )


def fake_dep(directory: Path) -> Path:
    files = {"rtk_fake_dep.py": b"VALUE = 1\n"}
    return make_wheel(directory, name="rtk_fake_dep", version="1.0", files=files)


def fresh_venv(path: Path, with_pip: bool = False) -> Path:
    """A venv of this Python's base interpreter; its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    argv = [base, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)]
    subprocess.run(argv, check=True, capture_output=True, timeout=240)
    return path / "bin" / "python"


def venv_paths(python: Path) -> tuple[Path, Path]:
    done = subprocess.run(
        [str(python), "-c", install.TARGET_PATHS], capture_output=True, text=True, check=True
    )
    paths = json.loads(done.stdout)
    return Path(paths["platlib"]), Path(paths["scripts"])


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=240)


def record_rows(dist_info: Path) -> dict[str, tuple[str, str]]:
    with (dist_info / "RECORD").open(newline="") as f:
        return {row[0]: (row[1], row[2]) for row in csv.reader(f) if row}


def test_build_from_the_wheel_leaves_the_jars_out_and_records_every_file_kept(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "ray.rtk.tar.xz"
    manifest = ray_archive.build(fake_ray(tmp_path), archive, level=0)

    assert (manifest.name, manifest.version, manifest.tags) == ("ray", VERSION, ("py3-none-any",))
    [left] = manifest.left_out
    assert (left.prefix, left.files, left.size_bytes) == ("ray/jars/", 1, len(JAR))
    assert "Java" in left.why
    with tarfile.open(archive, "r:xz") as tar:
        members = tar.getmembers()
        assert members[0].name == f"ray-{VERSION}.dist-info/{MANIFEST}"
        contents = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
        modes = {m.name: m.mode for m in members}
    assert not [n for n in contents if n.startswith("ray/jars")]
    assert modes["ray/core/raylet"] == 0o755 and modes["ray/__init__.py"] == 0o644
    assert contents[f"ray-{VERSION}.dist-info/INSTALLER"] == b"rtk-ray-archive\n"
    rows = list(csv.reader(io.StringIO(contents[f"ray-{VERSION}.dist-info/RECORD"].decode())))
    listed = {row[0]: row[1:] for row in rows}
    # Every file but RECORD itself, with its hash and size; nothing that is not there.
    assert set(listed) == set(contents)
    assert listed[f"ray-{VERSION}.dist-info/RECORD"] == ["", ""]
    for name, data in contents.items():
        if not name.endswith("/RECORD"):
            assert listed[name] == [record_hash(data), str(len(data))], name
    assert manifest.files == len(contents)
    assert ray_archive.read_manifest(archive) == manifest
    assert ray_archive.archive_name(manifest) == f"ray-{VERSION}-py3-none-any.rtk.tar.xz"


def test_install_into_a_fresh_venv_then_pip_uninstall_removes_all_of_it(tmp_path: Path) -> None:
    archive = tmp_path / "ray.rtk.tar.xz"
    ray_archive.build(fake_ray(tmp_path), archive, level=0)
    python = fresh_venv(tmp_path / "venv")
    site, bin_dir = venv_paths(python)
    (site / "rtk_fake_dep.py").write_text("VALUE = 1\n")

    done = ray_archive.install(archive, site, bin_dir, str(python))

    assert [p.name for p in done.scripts] == ["ray", "serve"]
    assert not (site / "ray" / "jars").exists()
    assert os.access(site / "ray" / "core" / "raylet", os.X_OK)
    assert not list(site.glob(".rtk-ray-*")), "the staging folder is gone"
    script = (bin_dir / "ray").read_text()
    assert script.startswith(f"#!{python}\n")
    ray = run([str(bin_dir / "ray"), "--version"])
    assert ray.returncode == 0, ray.stderr
    assert ray.stdout.split()[:3] == ["ray,", "version", VERSION]
    assert ray.stdout.split()[3].startswith(str(site))
    meta = run([str(python), "-c", "import importlib.metadata as m; print(m.version('ray'))"])
    assert meta.stdout.strip() == VERSION
    rows = record_rows(site / f"ray-{VERSION}.dist-info")
    data = (bin_dir / "ray").read_bytes()
    assert rows["../../../bin/ray"] == (record_hash(data), str(len(data)))

    # pip (this Python's) works on the fresh venv alone: the Ray under test is not there.
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    shown = run([*pip, "show", "ray"])
    assert f"Location: {site}" in shown.stdout, shown.stdout + shown.stderr
    gone = run([*pip, "uninstall", "-y", "ray"])
    assert gone.returncode == 0, gone.stderr
    assert not (site / "ray").exists() and not list(site.glob("ray-*.dist-info"))
    assert not (bin_dir / "ray").exists() and not (bin_dir / "serve").exists()


def test_an_installed_copy_packs_the_same_files_as_its_wheel(tmp_path: Path) -> None:
    first = tmp_path / "from-wheel.rtk.tar.xz"
    ray_archive.build(fake_ray(tmp_path), first, level=0)
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    ray_archive.install(first, site, bin_dir)
    (site / "ray" / "__pycache__").mkdir()
    (site / "ray" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    second = tmp_path / "from-site.rtk.tar.xz"

    manifest = ray_archive.build(site, second, level=1)

    assert manifest.source == "installed" and manifest.level == 1
    with tarfile.open(first, "r:xz") as a, tarfile.open(second, "r:xz") as b:
        assert sorted(a.getnames()) == sorted(b.getnames())
    # The same from its dist-info directory.
    assert ray_archive.build(site / f"ray-{VERSION}.dist-info", second, 0).files == manifest.files


def test_refused_for_another_python_and_where_ray_is_there(tmp_path: Path) -> None:
    other = tmp_path / "other.rtk.tar.xz"
    ray_archive.build(fake_ray(tmp_path, tag="cp27-cp27mu-manylinux1_x86_64"), other, 0)
    site = tmp_path / "site"
    with pytest.raises(ray_archive.RayArchiveError, match="cp27-cp27mu-manylinux1_x86_64"):
        ray_archive.install(other, site, tmp_path / "bin")
    assert not site.exists()

    archive = tmp_path / "ray.rtk.tar.xz"
    ray_archive.build(fake_ray(tmp_path), archive, 0)
    ray_archive.install(archive, site, tmp_path / "bin")
    with pytest.raises(ray_archive.RayArchiveError, match="already has ray"):
        ray_archive.install(archive, site, tmp_path / "bin")


def test_a_member_outside_site_packages_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.rtk.tar.xz"
    manifest = ray_archive.build(fake_ray(tmp_path), tmp_path / "good.rtk.tar.xz", 0)
    with tarfile.open(archive, "w:xz") as tar:
        for name, data in ((f"{manifest.dist_info}/{MANIFEST}", manifest.to_json().encode()),
                           ("ray/../../escaped.py", b"x = 1\n")):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    site = tmp_path / "site"

    with pytest.raises(ray_archive.RayArchiveError, match="outside site-packages"):
        ray_archive.install(archive, site, tmp_path / "bin")

    assert not (tmp_path / "escaped.py").exists()
    assert list(site.iterdir()) == [], "nothing half-unpacked is left"
    with pytest.raises(ray_archive.RayArchiveError, match="not a Ray archive"):
        ray_archive.read_manifest(fake_ray_tarball(tmp_path))


def fake_ray_tarball(tmp_path: Path) -> Path:
    path = tmp_path / "plain.tar.xz"
    with tarfile.open(path, "w:xz") as tar:
        info = tarfile.TarInfo("ray/__init__.py")
        tar.addfile(info, io.BytesIO(b""))
    return path


def test_a_long_interpreter_path_goes_through_sh(tmp_path: Path) -> None:
    folder = tmp_path / "a dir with spaces" / ("x" * 130)
    folder.mkdir(parents=True)
    python = folder / "python"
    python.symlink_to(sys.executable)
    (tmp_path / "hello.py").write_text("def main():\n    print('hello from', __name__)\n")
    script = tmp_path / "hello"
    script.write_text(unpack.script_text(str(python), "hello:main"))
    script.chmod(0o755)

    done = subprocess.run(
        [str(script)],
        capture_output=True,
        text=True,
        env={**clean_env(), "PYTHONPATH": str(tmp_path)},
    )

    assert script.read_text().startswith("#!/bin/sh\n")
    assert (done.returncode, done.stdout) == (0, "hello from hello\n"), done.stderr
    assert unpack.console_scripts(ENTRY_POINTS) == {
        "ray": "ray.scripts.scripts:main",
        "serve": "ray.serve:cli",
    }


def test_the_acceptance_install_unpacks_ray_and_its_deps_offline_once(tmp_path: Path) -> None:
    house = tmp_path / "wheelhouse"
    (house / ray_archive.DEPS_DIR).mkdir(parents=True)
    manifest = ray_archive.build(fake_ray(tmp_path), tmp_path / "a.rtk.tar.xz", 0)
    (tmp_path / "a.rtk.tar.xz").rename(house / ray_archive.archive_name(manifest))
    fake_dep(house / ray_archive.DEPS_DIR)
    python = str(fresh_venv(tmp_path / "venv", with_pip=True))
    said: list[str] = []
    log = install.InstallLog(python=python)
    installer = install.Installer(python, clean_env(), log, say=said.append)
    again = install.InstallLog(python=python)
    second = install.Installer(python, clean_env(), again, say=said.append)
    try:
        installer.from_wheelhouse(house)  # the wheelhouse's own wheels (none), then Ray
        second.ray_from_archive(house)
    finally:
        installer.close()
        second.close()

    assert log.failed == {}, log.failed
    assert log.installed == [f"ray {VERSION} (archive, without ray/jars/)", "rtk-fake-dep"]
    assert f"ray --version: ray, version {VERSION} " in log.notes[-1]
    assert any("--no-index" in s.get("command", "") for s in log.steps)
    assert again.installed == [] and again.notes == [f"ray {VERSION} imports: left as it is"]
    assert said[0].startswith(f"ray {VERSION}: unpacked into ")
    assert "Ray's dependencies: rtk-fake-dep" in said


def test_without_an_archive_the_install_says_so_and_installs_nothing(tmp_path: Path) -> None:
    python = str(fresh_venv(tmp_path / "venv"))
    log = install.InstallLog(python=python)
    installer = install.Installer(python, clean_env(), log, say=lambda line: None)
    try:
        installer.ray_from_archive(tmp_path)
    finally:
        installer.close()
    assert log.installed == [] and log.failed == {}
    assert log.notes == ["ray does not import, and the wheelhouse has no Ray archive"]


# The wheelhouse side: which dependency wheels travel, and the size budget.

RAY_REQUIRES = (
    "click>=7.0",
    "jsonschema",
    "aiohttp>=3.14; extra == 'default'",
    "py-spy>=0.2.0; python_version < '3.12' and extra == 'default'",
    "py-spy>=0.4.0; python_version >= '3.12' and extra == 'default'",
    "opencensus; extra == 'default'",
    "pydantic<3,>=2.5.0; extra == 'default'",
    "uvicorn[standard]>=0.26.0; extra == 'serve'",
    "pandas>=2.2.3; extra == 'data'",
)


def wheels_for_select(tmp_path: Path) -> dict[str, wheelhouse.Wheel]:
    specs = {
        "ray": ("2.60.0", RAY_REQUIRES),
        "click": ("8.1", ()),
        "jsonschema": ("4.26", ("attrs>=22", "rpds-py")),
        "attrs": ("26.1", ()),
        "rpds-py": ("2026.9", ()),
        "aiohttp": ("3.14", ("yarl", "multidict")),
        "yarl": ("1.25", ("multidict",)),
        "multidict": ("7.2", ()),
        "py-spy": ("0.4.3", ()),
        "opencensus": ("0.11", ("google-api-core[grpc]<3", "six")),
        "google-api-core": ("2.44", ("protobuf", "grpcio; extra == 'grpc'", "requests")),
        "six": ("1.17", ()),
        "pydantic": ("2.14", ("pydantic-core",)),
        "pydantic-core": ("2.50", ()),
        "protobuf": ("7.36", ()),
        "grpcio": ("1.85", ()),
        "requests": ("2.34", ("urllib3",)),
        "urllib3": ("2.8", ()),
    }
    return {
        name: wheelhouse.Wheel(tmp_path / f"{name}.whl", name, version, requires)
        for name, (version, requires) in specs.items()
    }


def test_select_carries_only_what_neither_the_image_nor_the_wheelhouse_has(
    tmp_path: Path,
) -> None:
    image = ("aiohttp", "grpcio", "protobuf", "requests", "click")
    chosen = wheelhouse.select(
        "ray", ("default",), wheels_for_select(tmp_path), image, ["pydantic", "pydantic_core"]
    )

    assert sorted(chosen.carried) == [
        "attrs", "google-api-core", "jsonschema", "opencensus", "py-spy", "rpds-py", "six",
    ]  # fmt: skip
    assert chosen.not_carried == {
        "click": "the GPU image has it",
        "aiohttp": "the GPU image has it",
        "pydantic": "the wheelhouse has it",
        "grpcio": "the GPU image has it",  # google-api-core[grpc]: the extra was followed
        "protobuf": "the GPU image has it",
        "requests": "the GPU image has it",
        "yarl": "needed only by what the GPU image or the wheelhouse has",
        "multidict": "needed only by what the GPU image or the wheelhouse has",
        "pydantic-core": "needed only by what the GPU image or the wheelhouse has",
        "urllib3": "needed only by what the GPU image or the wheelhouse has",
    }


def test_select_fails_on_a_requirement_pip_did_not_download(tmp_path: Path) -> None:
    wheels = wheels_for_select(tmp_path)
    del wheels["six"]
    with pytest.raises(ray_archive.RayArchiveError, match=r"six \(needed by opencensus\)"):
        wheelhouse.select("ray", ("default",), wheels, (), ())


def test_fill_writes_the_archive_and_ray_deps_and_checks_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    make_wheel(downloads, "ray", VERSION, "cp312-cp312-manylinux2014_x86_64", {
        "ray/__init__.py": b"", f"ray-{VERSION}.dist-info/entry_points.txt": b""}, (
        "jsonschema", "pydantic; extra == 'default'", "aiohttp; extra == 'default'"))  # fmt: skip
    make_wheel(downloads, "jsonschema", "4.26", requires=("attrs",))
    make_wheel(downloads, "attrs", "26.1")
    make_wheel(downloads, "aiohttp", "3.14", requires=("yarl",))
    make_wheel(downloads, "yarl", "1.25")
    make_wheel(downloads, "pydantic", "2.14")

    def download(python: str, dest: Path, version: str) -> dict[str, wheelhouse.Wheel]:
        assert version == VERSION
        return {w.name: w for w in map(wheelhouse.read_wheel, sorted(downloads.glob("*.whl")))}

    monkeypatch.setattr(wheelhouse, "download", download)
    house = tmp_path / "house"
    house.mkdir()
    (house / "pydantic-2.14-py3-none-any.whl").write_bytes(b"x" * 1000)
    (house / f"ray-1.0-py3-none-any{ray_archive.SUFFIX}").write_bytes(b"stale")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tracked.txt").write_bytes(b"y" * 3000)
    (repo / "untracked.txt").write_bytes(b"z" * 50000)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "tracked.txt"], check=True)
    assert wheelhouse.checkout_bytes(repo) == 3000

    lines = wheelhouse.fill(house, VERSION, sys.executable, 0, repo, budget_mib=60)

    archive = house / f"ray-{VERSION}-cp312-cp312-manylinux2014_x86_64{ray_archive.SUFFIX}"
    assert sorted(p.name for p in house.iterdir()) == sorted(
        [archive.name, "pydantic-2.14-py3-none-any.whl", ray_archive.DEPS_DIR]
    )
    assert sorted(p.name for p in (house / ray_archive.DEPS_DIR).iterdir()) == [
        "attrs-26.1-py3-none-any.whl",
        "jsonschema-4.26-py3-none-any.whl",
    ]
    assert lines[0].startswith(f"{archive.name}: ")
    assert "not carried (the GPU image has it): aiohttp" in lines
    assert "not carried (the wheelhouse has it): pydantic" in lines
    assert "not carried (needed only by what the GPU image or the wheelhouse has): yarl" in lines
    assert lines[-1].startswith("sizes: archive ") and lines[-1].endswith(" of 60 MiB")
    with pytest.raises(ray_archive.RayArchiveError, match="over the budget by"):
        wheelhouse.fill(house, VERSION, sys.executable, 0, repo, budget_mib=0.001)


def test_gpu_wheelhouse_sh_offers_ray_and_wants_a_directory() -> None:
    script = str(REPO / "scripts" / "gpu-wheelhouse.sh")
    usage = subprocess.run(["bash", script, "--with-ray"], capture_output=True, text=True)
    assert usage.returncode == 2
    assert "[--with-ray [--ray-version V]]" in usage.stderr
    helped = subprocess.run(["bash", script, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "DIR/ray-deps/" in helped.stdout
    assert helped.stdout.rstrip().endswith("exceed 60 MiB.")
