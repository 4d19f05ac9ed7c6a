"""Render a batch script from ``sbatch/*.sbatch.j2``: pure text in, text out."""

from __future__ import annotations

from collections.abc import Sequence

import jinja2

from toolkit.resources import template_env
from toolkit.shell import join
from toolkit.slurm.batch_options import SbatchOptionError, SbatchOptions

# The template behind each ``--template`` choice.
TEMPLATES = {
    "cluster": "ray-cluster.sbatch.j2",
    "train": "train.sbatch.j2",
    "torchrun": "torchrun.sbatch.j2",
}
HEREDOC_END = "RTK_INVENTORY_EOF"


def render_script(
    template: str,
    inventory_text: str,
    inventory_path: str,
    options: SbatchOptions,
    command: Sequence[str] = (),
    container_note: Sequence[str] = (),
) -> str:
    """The complete batch script.

    Args:
        template: ``cluster`` (Ray, then COMMAND under telemetry, or hold the cluster),
            ``train`` (Ray, preflight, rtk train with telemetry, report) or ``torchrun``
            (Ray, preflight, rtk torchrun with telemetry, report).
        inventory_text: The inventory file's text, embedded verbatim in the script.
        inventory_path: Where it came from, as the user named it (shown in the log).
        options: The merged job options.
        command: For ``cluster``, the command to run (none: hold the cluster); for
            ``train``, options passed on to ``rtk train``; for ``torchrun``, rtk
            torchrun's options and script (``torchrun_words``).
        container_note: Comment lines on how Ray's steps run in containers
            (``toolkit.cluster.containers.slurm_step.batch_script_note``); none without.

    Raises:
        SbatchOptionError: Unknown template, or ``--requeue`` with one that cannot
            resume (only ``train`` can).
    """
    if template not in TEMPLATES:
        raise SbatchOptionError(f"--template: got {template!r}; give one of {', '.join(TEMPLATES)}")
    if options.requeue and template != "train":
        raise SbatchOptionError(
            f"--requeue (--max-restarts {options.max_restarts}): only --template train "
            "requeues itself, as rtk train says how far its run got and resumes from its "
            f"checkpoint; the {template} template cannot tell whether its command's work "
            "is done (give --max-restarts 0, or requeue from your program: scontrol requeue)"
        )
    text = inventory_text if inventory_text.endswith("\n") else inventory_text + "\n"
    return (
        _environment()
        .get_template(TEMPLATES[template])
        .render(
            template_file=TEMPLATES[template],
            o=options,
            inventory_text=text,
            inventory_path=inventory_path,
            heredoc_end=_heredoc_end(text),
            command=list(command),
            hold=template == "cluster" and not command,
            container_note=list(container_note),
        )
    )


def _environment() -> jinja2.Environment:
    env = template_env("sbatch")
    env.filters.setdefault("shjoin", join)
    return env


def _heredoc_end(text: str) -> str:
    """A heredoc delimiter that no line of ``text`` equals."""
    lines = set(text.splitlines())
    end, n = HEREDOC_END, 0
    while end in lines:
        n += 1
        end = f"{HEREDOC_END}_{n}"
    return end


def torchrun_words(command: Sequence[str]) -> list[str]:
    """``rtk torchrun``'s words after the inventory: its options, ``--``, the script.

    ``train.py --epochs 1`` (no ``--``, no option first) is the script alone, so the
    ``--`` that keeps its options from rtk's is put in front of it.
    """
    words = list(command)
    if words and "--" not in words and not words[0].startswith("-"):
        return ["--", *words]
    return words
