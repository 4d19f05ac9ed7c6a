"""Telemetry beside a workload without Ray, in the run directory's own layout.

rtk's session runs one sampler per node as a Ray actor; without Ray, ``LocalTelemetry``
runs the same ``Sampler`` with the same sensors in this process and writes the same
manifest (one node: this machine), so ``build_report`` reads the run exactly as it
reads one rtk collected. ``report_figures`` builds and writes the report and returns
its headline figures.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.telemetry.sampler import SamplerStats


class LocalTelemetry:
    """Sample this machine into ``run_dir`` while the ``with`` block runs."""

    def __init__(
        self,
        run_dir: Path,
        node: str | None = None,
        rate_hz: float = 10.0,
        power_rate_hz: float = 50.0,
        sensors: str = "auto",
    ) -> None:
        self.run_dir = run_dir
        self.node = node or socket.gethostname()
        self.rate_hz = rate_hz
        self.power_rate_hz = power_rate_hz
        self.kinds = sensors
        self.stats: dict[str, Any] = {}

    def __enter__(self) -> LocalTelemetry:
        from toolkit.rundir import RunDir
        from toolkit.telemetry.sampler import Sampler
        from toolkit.telemetry.sensors.factory import make_sensors

        self.sensors = make_sensors(self.kinds)
        self.devices: dict[str, Any] = {}
        for sensor in self.sensors:
            self.devices.update(sensor.devices())
        path = RunDir(self.run_dir).node_dir(self.node) / "trace-001.arrows"
        self.sampler = Sampler(self.sensors, path, self.rate_hz, self.power_rate_hz)
        self.started_wall_s = time.time()
        self._manifest("running", None)
        self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        stats = self.sampler.stop()
        for sensor in self.sensors:
            sensor.close()
        self.stats = stats.to_json()
        self._manifest("complete", stats, time.time())

    def _manifest(
        self, status: str, stats: SamplerStats | None, ended: float | None = None
    ) -> None:
        from toolkit.rundir import Manifest, NodeManifest, RunDir

        node = NodeManifest(
            name=self.node,
            hostname=socket.gethostname(),
            offset_s=0.0,
            uncertainty_s=0.0,
            status=status,
            devices=self.devices,
            samples_expected=None if stats is None else stats.samples,
            error=None,
            sensors=tuple(s.name for s in self.sensors),
            first_wall_s=None if stats is None else stats.first_wall_s,
            last_wall_s=None if stats is None else stats.last_wall_s,
            sampler=None if stats is None else stats.summary(),
        )
        Manifest(
            head=self.node,
            rate_hz=self.rate_hz,
            power_rate_hz=self.power_rate_hz,
            nodes={self.node: node},
            run_dir=str(self.run_dir),
            started_wall_s=self.started_wall_s,
            ended_wall_s=ended,
        ).write(RunDir(self.run_dir).manifest)


def report_figures(run_dir: Path) -> dict[str, Any]:
    """Build and write the run's report; its headline figures and where it went."""
    from toolkit.telemetry.report.build import build_report
    from toolkit.telemetry.report.write import write_report

    report = build_report(run_dir)
    files = write_report(report)
    run = report.run
    return {
        "tokens_per_s": run.tokens_per_s,
        "energy_j": run.energy_j,
        "energy_per_token_j": run.energy_per_token_j,
        "tokens_per_j": run.tokens_per_j,
        "steps": run.steps,
        "window_s": run.duration_s,
        "partial": run.partial,
        "cross_checks": [
            {
                "device": c.device,
                "basis": c.basis,
                "windows": len(c.windows),
                "power_over_counter": c.ratio,
                "flagged_windows": len(c.flagged),
            }
            for c in report.cross_checks
        ],
        "notes": list(report.notes),
        "report_files": sorted(p.name for p in files.directory.iterdir()),
        "html_bytes": files.html.stat().st_size if files.html.exists() else 0,
    }
