"""``--help`` that lists a command's options under named sections, not as one long list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import click

from toolkit.cli.options.spellings import UnderscoreSpellings

OTHER = "Other"


class SectionedCommand(click.Command):
    """A command whose help prints its options in the sections ``SECTIONS`` names.

    ``SECTIONS`` maps a section's title to the names of its options (the parameter
    names: ``model_size`` for ``--model-size``), in the order they are shown. An
    option no section names is shown under "Other", last, with ``--help``.
    """

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {}

    def unmapped(self) -> list[str]:
        """The names of the shown options no section names (``--help`` aside)."""
        known = {name for names in self.SECTIONS.values() for name in names}
        return [
            str(p.name)
            for p in self.params
            if isinstance(p, click.Option)
            and not p.hidden
            and p.name not in known
            and p.name != "help"
        ]

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write the options, section by section; sections with no options are left out."""
        order = {
            name: (index, position)
            for index, names in enumerate(self.SECTIONS.values())
            for position, name in enumerate(names)
        }
        titles = [*self.SECTIONS, OTHER]
        rows: dict[str, list[tuple[tuple[int, int], tuple[str, str]]]] = {t: [] for t in titles}
        for declared, param in enumerate(self.get_params(ctx)):
            # Arguments are shown in the usage line, as click's own help does.
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is None:
                continue
            index, position = order.get(str(param.name), (len(titles) - 1, declared))
            rows[titles[index]].append(((index, position), record))
        for title in titles:
            if rows[title]:
                with formatter.section(title):
                    formatter.write_dl([record for _, record in sorted(rows[title])])


class TrainCommand(UnderscoreSpellings, SectionedCommand):
    """``rtk train``: its options by what they are about; ``--model_size`` works too.

    The underscore spellings are those of the scripts rtk's trainer stands in for
    (``train_gpt.py --model_size 350M --batch_size 2 ...``).
    """

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {
        "Model": ("model_size", "layers", "width", "heads", "seq_len", "precision"),
        "Data": ("data", "batch_size", "seed"),
        "Optimisation": (
            "max_steps",
            "learning_rate",
            "warmup_steps",
            "gradient_accumulation_steps",
        ),
        "Parallelism and strategy": (
            "strategy",
            "num_workers",
            "resources_per_worker",
            "bucket_cap_mb",
            "zero_stage",
            "offload_optimizer",
            "gradient_checkpointing",
            "compile",
        ),
        "Checkpoints and failures": (
            "save_steps",
            "keep_checkpoints",
            "resume",
            "checkpoint_on_stop",
            "max_failures",
            "on_stall",
            "stall_timeout_s",
            "stall_floor_s",
            "restart_wait_s",
        ),
        "Run directory and output": ("output_dir", "run_id", "log_every"),
        "Telemetry": (
            "telemetry",
            "telemetry_sensors",
            "telemetry_rate_hz",
            "power_rate_hz",
            "energy_rate_hz",
            "prometheus_port",
            "barrier_every",
            "baseline_s",
            "cooldown_max_s",
        ),
        "Power limits": ("power_policy", "max_slowdown", "eta"),
        "Preflight": ("preflight",),
        # dry_run: rtk train --dry-run, where it is given.
        "Cluster and inventory": (
            "local",
            "slurm",
            "ray_address",
            "driver",
            "bring_up",
            "dry_run",
            "show_timings",
        ),
    }
