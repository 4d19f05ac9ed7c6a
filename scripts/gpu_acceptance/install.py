"""Install what the stages need and the machine lacks, never touching its CUDA torch.

Sources, in order: a wheelhouse directory brought along (``--wheelhouse``, filled by
``scripts/gpu-wheelhouse.sh`` on a machine with the package registry), then the
registry itself when it answers (not with ``--offline``). Every pip call pins what the
machine already has of ``PROTECTED`` (a constraints file), and wheelhouse files go in
with ``--no-deps``: a wheel never pulls a different torch. rtk itself goes in with
``pip install --no-deps -e .`` when hatchling (its build backend) is there; otherwise
the stages find it on ``PYTHONPATH`` and the record says so.

Ray travels apart (``gpu-wheelhouse.sh --with-ray``): one archive of it, unpacked
without pip into the target Python's site-packages when ``import ray`` fails there
(``ray_archive``), and the wheels of what it needs in ``ray-deps/``, installed with it.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_acceptance import procs, ray_archive

# Never installed or replaced: the machine's CUDA build of torch and what it was built with
# (the CUDA libraries come as nvidia-* wheels; NVML's Python binding is not one of them).
PROTECTED = ("torch", "torchvision", "torchaudio", "triton", "numpy", "nvidia-*")
NOT_PROTECTED = ("nvidia-ml-py",)
# Build backends go first, sdists last (they may need the backends to build).
BUILD_TOOLS = ("setuptools", "wheel", "hatchling", "editables")
# What the registry is asked for when something is still missing (module -> requirement).
REGISTRY_WANTED = {
    "pynvml": "nvidia-ml-py",
    "pydantic": "pydantic>=2.7,<3",
    "fabric": "fabric>=3.2,<4",
    "deepspeed": "deepspeed>=0.16",
    "zeus": "zeus",
    "httpx": "httpx",
}
PIP_TIMEOUT_S = 240.0
# The target's own paths: where Ray's archive and its scripts go.
TARGET_PATHS = (
    "import json, sysconfig; p = sysconfig.get_paths();"
    " print(json.dumps({'platlib': p['platlib'], 'scripts': p['scripts']}))"
)


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of(filename: str) -> str | None:
    """The distribution a wheel or sdist file holds (None for anything else).

    ``hjson-3.1.0-py3-none-any.whl`` -> ``hjson``; ``deepspeed-0.19.8.tar.gz`` ->
    ``deepspeed``; ``py_cpuinfo-9.0.0-py3-none-any.whl`` -> ``py-cpuinfo``.
    """
    if filename.endswith(".whl"):
        return normalize(filename.split("-")[0])
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            name, _, version = stem.rpartition("-")
            return normalize(name) if name and version[:1].isdigit() else None
    return None


def is_protected(name: str) -> bool:
    """Whether ``name`` is one the machine's own copy of must be kept."""
    name = normalize(name)
    if name in NOT_PROTECTED:
        return False
    return any(fnmatch.fnmatch(name, pattern) for pattern in PROTECTED)


@dataclass(frozen=True)
class WheelhousePlan:
    """What to install from the wheelhouse, in order, and what is left out and why.

    Attributes:
        build_tools: Build backends, installed first.
        wheels: The other wheels, installed together.
        sdists: Source distributions, each built and installed on its own.
        skipped: File name -> why it is not installed.
    """

    build_tools: list[Path] = field(default_factory=list)
    wheels: list[Path] = field(default_factory=list)
    sdists: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing to install."""
        return not (self.build_tools or self.wheels or self.sdists)


def plan_wheelhouse(files: Iterable[Path], installed: Iterable[str]) -> WheelhousePlan:
    """Which wheelhouse files to install, given the distributions already installed."""
    have = {normalize(n) for n in installed}
    plan = WheelhousePlan()
    chosen: dict[str, Path] = {}
    for path in sorted(files, key=lambda p: p.name):
        name = distribution_of(path.name)
        if name is None:
            continue
        if is_protected(name):
            plan.skipped[path.name] = "protected: the machine's own copy is kept"
        elif name in have:
            plan.skipped[path.name] = "already installed"
        elif name in chosen:
            # A wheel beats an sdist of the same project.
            if path.name.endswith(".whl") and not chosen[name].name.endswith(".whl"):
                plan.skipped[chosen[name].name] = "a wheel of it is there too"
                chosen[name] = path
            else:
                plan.skipped[path.name] = f"{chosen[name].name} is there too"
        else:
            chosen[name] = path
    for name, path in chosen.items():
        if name in BUILD_TOOLS and path.name.endswith(".whl"):
            plan.build_tools.append(path)
        elif path.name.endswith(".whl"):
            plan.wheels.append(path)
        else:
            plan.sdists.append(path)
    return plan


def constraints(installed_versions: dict[str, str]) -> str:
    """A pip constraints file pinning every protected distribution installed."""
    lines = [
        f"{name}=={version}"
        for name, version in sorted(installed_versions.items())
        if is_protected(name)
    ]
    return "\n".join(lines) + ("\n" if lines else "")


@dataclass
class InstallLog:
    """What the install step did, for the record."""

    python: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rtk: str = "not installed"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "python": self.python,
            "rtk": self.rtk,
            "installed": self.installed,
            "failed": self.failed,
            "notes": self.notes,
            "steps": self.steps,
        }


def installed_distributions(python: str, env: dict[str, str]) -> dict[str, str]:
    """Every distribution installed for ``python``: normalized name -> version."""
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()"
        " if d.metadata['Name']}))"
    )
    done = procs.run([python, "-c", code], 60, env=env)
    if not done.ok:
        return {}
    data: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return {normalize(k): v for k, v in data.items()}


class Installer:
    """Runs the pip calls for one Python and logs each."""

    def __init__(
        self,
        python: str,
        env: dict[str, str],
        log: InstallLog,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.python = python
        self.env = {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "DS_BUILD_OPS": "0"}
        self.log = log
        self.say = say or (lambda line: print(f"setup: {line}", flush=True))
        self._constraints = Path(tempfile.mkstemp(prefix="rtk-constraints-", suffix=".txt")[1])
        self.refresh_constraints()

    def refresh_constraints(self) -> dict[str, str]:
        """Pin what is installed of ``PROTECTED``; returns every installed distribution."""
        have = installed_distributions(self.python, self.env)
        self._constraints.write_text(constraints(have), encoding="utf-8")
        return have

    def pip(self, args: Sequence[str], what: str, timeout_s: float = PIP_TIMEOUT_S) -> bool:
        """``python -m pip install ARGS`` with the constraints; logged; True when it worked."""
        argv = [self.python, "-m", "pip", "install", "-c", str(self._constraints), *args]
        began = time.monotonic()
        done = procs.run(argv, timeout_s, env=self.env)
        self.log.steps.append(
            {
                "what": what,
                "command": " ".join(a if len(a) < 80 else "..." + a[-60:] for a in argv[1:]),
                "rc": done.rc,
                "timed_out": done.timed_out,
                "duration_s": round(time.monotonic() - began, 2),
                "output_tail": procs.tail((done.stdout + done.stderr).strip(), 800),
            }
        )
        return done.ok

    def from_wheelhouse(self, wheelhouse: Path, sdists: bool = True) -> None:
        """Install the wheelhouse's files that the machine lacks (``--no-deps``, offline).

        Then Ray from its archive there, when it does not import (``ray_from_archive``).
        Without ``sdists``, source distributions (DeepSpeed, built there) are left out.
        """
        files = [p for p in wheelhouse.iterdir() if p.is_file()]
        plan = plan_wheelhouse(files, self.refresh_constraints())
        for name, why in plan.skipped.items():
            self.log.notes.append(f"wheelhouse {name}: {why}")
        if not sdists:
            for sdist in plan.sdists:
                self.log.notes.append(f"wheelhouse {sdist.name}: not built (--essentials)")
        base = ["--no-index", "--find-links", str(wheelhouse), "--no-deps"]
        if plan.build_tools:
            self._install_all(base, plan.build_tools, "build tools from the wheelhouse")
        if plan.wheels:
            self._install_all(base, plan.wheels, "wheels from the wheelhouse")
        for sdist in plan.sdists if sdists else ():
            # Built against the torch already here, so without build isolation.
            name = distribution_of(sdist.name) or sdist.name
            if self.pip([*base, "--no-build-isolation", str(sdist)], f"{name} (sdist)", 420):
                self.log.installed.append(name)
            else:
                self.log.failed[name] = self.log.steps[-1]["output_tail"][-300:]
        self.ray_from_archive(wheelhouse)

    def _install_all(self, base: list[str], files: list[Path], what: str) -> None:
        names = [distribution_of(f.name) or f.name for f in files]
        if self.pip([*base, *map(str, files)], what):
            self.log.installed += names
            return
        for name, path in zip(names, files, strict=True):  # one by one: find the bad one
            if self.pip([*base, str(path)], name):
                self.log.installed.append(name)
            else:
                self.log.failed[name] = self.log.steps[-1]["output_tail"][-300:]

    def ray_from_archive(self, wheelhouse: Path) -> None:
        """Ray from the wheelhouse's archive, when the target Python cannot import it.

        Ray that imports is left as it is. Otherwise the archive goes into the target's
        site-packages and its scripts into the target's scripts directory (a venv's
        ``bin/``), then the ``ray-deps/`` wheels it lacks go in with pip, offline;
        ``ray --version`` must answer afterwards.
        """
        probe = procs.run(
            [self.python, "-c", "import ray; print(ray.__version__)"], 120, env=self.env
        )
        if probe.ok:
            self._note(f"ray {procs.last_line(probe.stdout)} imports: left as it is")
            return
        archives = sorted(wheelhouse.glob(f"ray-*{ray_archive.SUFFIX}"))  # the last one is used
        if not archives:
            self._note("ray does not import, and the wheelhouse has no Ray archive")
            return
        paths = procs.run([self.python, "-c", TARGET_PATHS], 60, env=self.env)
        if not paths.ok:
            self.log.failed["ray"] = paths.why(300)
            return
        target = json.loads(paths.stdout.strip().splitlines()[-1])
        if "ray" in self.refresh_constraints():  # there, but broken: maybe a dependency
            why = procs.last_line(probe.stderr)
            self._note(f"ray is installed but does not import ({why}): not unpacked over it")
        else:
            began = time.monotonic()
            try:
                done = ray_archive.install(
                    archives[-1], Path(target["platlib"]), Path(target["scripts"]), self.python
                )
            except ray_archive.RayArchiveError as e:
                self.log.failed["ray"] = str(e)
                self.say(f"ray from {archives[-1].name} failed: {e}")
                return
            what = f"ray {done.manifest.version}"
            self.log.steps.append(
                {
                    "what": f"{what} from {archives[-1].name}",
                    "rc": 0,
                    "duration_s": round(time.monotonic() - began, 2),
                    "output_tail": "; ".join(ray_archive.describe(done.manifest)),
                }
            )
            self.log.installed.append(f"{what} (archive, without ray/jars/)")
            scripts = ", ".join(p.name for p in done.scripts)
            self.say(f"{what}: unpacked into {done.site_packages}; scripts {scripts}")
        self._ray_deps(wheelhouse)
        ray = str(Path(target["scripts"]) / "ray")
        check = procs.run([ray, "--version"], 120, env=self.env)
        if check.ok:
            self._note(f"ray --version: {procs.last_line(check.stdout)}")
        else:
            self.log.failed["ray --version"] = check.why(300)
            self.say(f"ray --version failed: {check.why(300)}")

    def _ray_deps(self, wheelhouse: Path) -> None:
        """The ``ray-deps/`` wheels not installed yet, resolved offline (else ``--no-deps``)."""
        deps = wheelhouse / ray_archive.DEPS_DIR
        have = self.refresh_constraints()
        wheels = [
            w
            for w in sorted(deps.glob("*.whl"))
            if (distribution_of(w.name) or w.name) not in have
            and not is_protected(distribution_of(w.name) or w.name)
        ]
        if not wheels:
            return
        names = [distribution_of(w.name) or w.name for w in wheels]
        base = ["--no-index", "--find-links", str(wheelhouse), "--find-links", str(deps)]
        files = [str(w) for w in wheels]
        if self.pip([*base, *files], "Ray's dependencies (offline)"):
            self.log.installed += names
            self.say(f"Ray's dependencies: {', '.join(names)}")
        elif self.pip([*base, "--no-deps", *files], "Ray's dependencies (offline, --no-deps)"):
            # What the machine has of theirs (protobuf, say) is older than they want.
            self.log.installed += names
            self._note(f"Ray's dependencies, with --no-deps (pip could not resolve them): {names}")
        else:
            self.log.failed["ray-deps"] = self.log.steps[-1]["output_tail"][-300:]
            self.say(f"Ray's dependencies failed: {self.log.failed['ray-deps']}")

    def _note(self, line: str) -> None:
        self.log.notes.append(line)
        self.say(line)

    def registry_answers(self) -> bool:
        """Whether the package registry answers (a tiny download, no retries)."""
        with tempfile.TemporaryDirectory(prefix="rtk-pip-probe-") as tmp:
            argv = [self.python, "-m", "pip", "download", "--no-deps", "--retries", "0"]
            argv += ["--timeout", "5", "--dest", tmp, "hjson"]
            done = procs.run(argv, 40, env=self.env)
        self.log.steps.append(
            {
                "what": "is the package registry reachable",
                "rc": done.rc,
                "timed_out": done.timed_out,
            }
        )
        return done.ok

    def from_registry(self, missing_modules: Iterable[str]) -> None:
        """Install from the registry what still does not import (deps resolved, torch pinned)."""
        for module in missing_modules:
            requirement = REGISTRY_WANTED.get(module)
            if requirement is None:
                continue
            extra = ["--no-build-isolation"] if module == "deepspeed" else []
            if module == "deepspeed":
                self.pip(["setuptools", "wheel"], "build tools from the registry")
            args = [*extra, "--retries", "1", "--timeout", "15", requirement]
            if self.pip(args, f"{requirement} from the registry"):
                self.log.installed.append(requirement)
            else:
                self.log.failed[requirement] = self.log.steps[-1]["output_tail"][-300:]

    def rtk(self, repo: Path, can_build: bool) -> None:
        """``pip install --no-deps -e REPO`` when hatchling is there; else PYTHONPATH."""
        if not can_build:
            self.log.rtk = "on PYTHONPATH (hatchling and editables, its build tools, are not here)"
            return
        ok = self.pip(["--no-deps", "--no-build-isolation", "-e", str(repo)], "rtk (editable)")
        self.log.rtk = "pip install --no-deps -e ." if ok else "on PYTHONPATH (pip install failed)"

    def close(self) -> None:
        """Remove the constraints file."""
        self._constraints.unlink(missing_ok=True)
