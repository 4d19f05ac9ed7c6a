"""``RunDir``: every path of a run directory, in one place (docs/telemetry.md).

The trainer, the telemetry session, the report, the sweep runner and the node agent
all find a run's files through this class, so the layout is spelled once::

    RUN_DIR/
      train_config.json          the trainer's options and worker layout
      preflight.json             the preflight checks run before it
      idle.json                  idle baseline before, cooldown after
      command.json               the command ``rtk telemetry record`` ran
      profile_run.json           a sweep run's outcome (``rtk profile``)
      metrics.jsonl              one line per step (rank 0)
      metrics.superseded.jsonl   steps of a failed attempt, trained again
      allocations.jsonl          a requeued batch job's allocations, one line each
      stop_requested             asks the trainer to checkpoint and stop (SIGINT)
      markers/rank-NNNNN.jsonl   every rank's step and barrier markers
      telemetry/manifest.json    nodes, sensors, clock offsets
      telemetry/nodes/NODE/trace-NNN.arrows   (samples.jsonl before traces were Arrow)
      report/                    summary.json, traces.csv, plots/, report.html
      train/                     Ray Train's checkpoints
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.rundir.pack import PACK_PATTERNS
from toolkit.rundir.trace_files import node_trace_files

MARKERS_DIR = "markers"
STACKS_DIR = "stacks"
FLIGHT_DIR = "flight"  # the ranks' Flight Recorder dumps, when a stall asks for them
TELEMETRY_DIR = "telemetry"
REPORT_DIR = "report"
CHECKPOINTS_DIR = "train"  # Ray Train's run name under the run directory


class RunDir:
    """The paths of one run directory (nothing is created or read here).

    Attributes:
        root: The run directory itself.
    """

    pack_patterns = PACK_PATTERNS

    def __init__(self, root: str | Path) -> None:
        """Name the run directory at ``root`` (``~`` is expanded)."""
        self.root = Path(os.path.expanduser(str(root)))

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root)

    @classmethod
    def find(cls, path: str | Path) -> RunDir:
        """The run directory ``path`` is, or holds as its report (``RUN_DIR/report``).

        A path inside ``report/`` whose parent has a run's files is taken as that
        parent; any other path is taken as given.
        """
        path = Path(path)
        # "." or ".." from inside report/ has no name to go by: resolve it first.
        given = cls(path.resolve() if path.name in ("", "..") else path)
        for candidate in (given.root, *given.root.parents):
            if candidate.name == REPORT_DIR:
                parent = cls(candidate.parent)
                if parent.looks_like_a_run() and not given.looks_like_a_run():
                    return parent
        return given

    def looks_like_a_run(self) -> bool:
        """Whether any of a run's own files are here (telemetry, markers, records)."""
        return any(
            path.exists()
            for path in (
                self.manifest,
                self.markers_dir,
                self.metrics,
                self.idle,
                self.command,
                self.profile_run,
                self.train_config,
                self.preflight,
            )
        )

    # Records at the top.
    @property
    def train_config(self) -> Path:
        """The trainer's options and worker layout (``train_config.json``)."""
        return self.root / "train_config.json"

    @property
    def preflight(self) -> Path:
        """The preflight checks run before the workload (``preflight.json``)."""
        return self.root / "preflight.json"

    @property
    def idle(self) -> Path:
        """The idle baseline and cooldown (``idle.json``)."""
        return self.root / "idle.json"

    @property
    def command(self) -> Path:
        """The command ``rtk telemetry record`` ran and how it ended (``command.json``)."""
        return self.root / "command.json"

    @property
    def profile_run(self) -> Path:
        """A sweep run's outcome (``profile_run.json``)."""
        return self.root / "profile_run.json"

    @property
    def metrics(self) -> Path:
        """One line per step, written by rank 0 (``metrics.jsonl``)."""
        return self.root / "metrics.jsonl"

    @property
    def superseded_metrics(self) -> Path:
        """Steps of a failed attempt, trained again after a restart."""
        return self.root / "metrics.superseded.jsonl"

    @property
    def allocations(self) -> Path:
        """A requeued batch job's allocations, one line each (``allocations.jsonl``)."""
        return self.root / "allocations.jsonl"

    @property
    def stop_request(self) -> Path:
        """Written by the training driver on SIGINT: every rank checkpoints and stops."""
        return self.root / "stop_requested"

    @property
    def stall(self) -> Path:
        """The stalls the watchdog saw, with every rank's evidence (``stall.records``)."""
        return self.root / "stall.json"

    @property
    def power(self) -> Path:
        """The power policy's windows and decisions, one per line (``power.records``)."""
        return self.root / "power.jsonl"

    def stack_dump(self, rank: int) -> Path:
        """Where rank ``rank``'s faulthandler writes its stacks when rtk asks for them."""
        return self.root / STACKS_DIR / f"rank-{rank}.txt"

    @property
    def flight_request(self) -> Path:
        """Written on a node to ask its ranks for their Flight Recorder (its text: an id)."""
        return self.root / FLIGHT_DIR / "request"

    def flight_dump(self, rank: int) -> Path:
        """Where rank ``rank`` writes its Flight Recorder's collectives, as JSON, when asked."""
        return self.root / FLIGHT_DIR / f"rank-{rank:05d}.json"

    # Markers.
    @property
    def markers_dir(self) -> Path:
        """Where every rank writes its markers."""
        return self.root / MARKERS_DIR

    def marker(self, rank: int) -> Path:
        """Where rank ``rank`` writes its markers."""
        return self.markers_dir / f"rank-{rank:05d}.jsonl"

    def marker_files(self) -> list[Path]:
        """Every rank's marker file there is, in rank order."""
        return sorted(self.markers_dir.glob("rank-*.jsonl"))

    def rank_files(self) -> list[Path]:
        """What ranks write on their own node: markers, and rank 0's metrics, there are.

        Without a shared filesystem these are on the ranks' nodes only; the driver
        copies them to the head's run directory when the run ends
        (``toolkit.telemetry.rank_files``).
        """
        metrics = [p for p in (self.metrics, self.superseded_metrics) if p.is_file()]
        return [*self.marker_files(), *metrics]

    # Telemetry.
    @property
    def telemetry_dir(self) -> Path:
        """The collected telemetry."""
        return self.root / TELEMETRY_DIR

    @property
    def manifest(self) -> Path:
        """The telemetry manifest: nodes, sensors, clock offsets."""
        return self.telemetry_dir / "manifest.json"

    @property
    def nodes_dir(self) -> Path:
        """One directory per node, named as in the manifest."""
        return self.telemetry_dir / "nodes"

    def node_dir(self, node: str) -> Path:
        """Where a node's collected traces are."""
        return self.nodes_dir / node

    def node_traces(self, node: str) -> list[Path]:
        """A node's collected traces, in order (``toolkit/rundir/trace_files.py``)."""
        return node_trace_files(self.node_dir(node))

    @property
    def has_telemetry(self) -> bool:
        """Whether the telemetry manifest is here (on this machine)."""
        return self.manifest.exists()

    @property
    def seen_here(self) -> bool:
        """Whether this machine sees the run directory its driver wrote on the head.

        The driver writes the telemetry manifest, or without telemetry the trainer's
        train_config.json: here, one of them means a filesystem shared with the head.
        """
        return self.has_telemetry or self.train_config.exists()

    # Report.
    @property
    def report_dir(self) -> Path:
        """Where ``rtk report`` writes."""
        return self.root / REPORT_DIR

    @property
    def report_summary(self) -> Path:
        """Every figure of the report, as JSON."""
        return self.report_dir / "summary.json"

    @property
    def report_traces(self) -> Path:
        """Every sample on the aligned timeline."""
        return self.report_dir / "traces.csv"

    @property
    def report_html(self) -> Path:
        """The report page."""
        return self.report_dir / "report.html"

    @property
    def report_plots_dir(self) -> Path:
        """The report's PNG plots."""
        return self.report_dir / "plots"

    # Checkpoints.
    @property
    def checkpoints_dir(self) -> Path:
        """Ray Train's run folder with the checkpoints (never packed)."""
        return self.root / CHECKPOINTS_DIR
