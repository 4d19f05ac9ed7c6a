"""Preflight measurements as Ray jobs: submit a module, show its progress, read its answer.

A preflight job is ``python -m MODULE OPTIONS_JSON`` on the head, with rtk's source
as its ``py_modules``. It prints progress lines that start with a prefix of its own
(``rtk bandwidth: ``), which are shown to the user as they come, and last one line
with its result prefix (``rtk-bandwidth: ``) and the result as JSON. Ray's own lines
and library warnings in the log are not shown.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError
from toolkit.jobs.client import job_client, run_job
from toolkit.json_types import JsonObject
from toolkit.state.store import StateStore


@dataclass(frozen=True)
class PreflightJob:
    """One preflight job to submit.

    Attributes:
        label: What it measures, in its name and errors (``bandwidth``, ``load``).
        module: The job's entrypoint, run as ``python -m``.
        options: Its options, passed as one JSON argument (the job's options record's
            ``to_json``).
        progress_prefix: Its lines that start with this are shown as they come.
        result_prefix: Its last line with this prefix carries the result.
    """

    label: str
    module: str
    options: JsonObject
    progress_prefix: str
    result_prefix: str

    def entrypoint(self, python: str) -> str:
        """The job's command line on the head."""
        return shlex.join([python, "-m", self.module, json.dumps(self.options)])


def job_result(lines: Iterable[str], result_prefix: str) -> JsonObject | None:
    """The JSON object on the last line that starts with ``result_prefix``; None if none.

    It is the job's answer as printed, for its result record's ``from_json`` to read.
    """
    found = [line[len(result_prefix) :] for line in lines if line.startswith(result_prefix)]
    if not found:
        return None
    result = json.loads(found[-1])
    return result if isinstance(result, dict) else None


def run_preflight_job(
    plan: ClusterPlan, store: StateStore, job: PreflightJob, echo: Callable[[str], None]
) -> JsonObject:
    """Run ``job`` on the cluster's head and return its result, as printed.

    Raises:
        ClusterError: The job failed or printed no result; the message has its status.
    """
    from toolkit.jobs.shipped_code import code_env

    logs: list[str] = []

    def keep(text: str) -> None:
        logs.append(text)
        for line in text.splitlines():
            if line.startswith(job.progress_prefix):  # not Ray's own lines nor c10d warnings
                echo(line)

    outcome = run_job(
        job_client(plan, store),
        job.entrypoint(plan.head.node.python),
        code_env(ship=True),
        f"rtk-{job.label}-{int(time.time() * 1000)}",
        keep,
    )
    try:
        result = job_result("\n".join(logs).splitlines(), job.result_prefix)
    except json.JSONDecodeError as e:
        raise ClusterError(
            f"the {job.label} job {outcome.job_id} printed a broken result: {e}"
        ) from e
    if not outcome.ok or result is None:
        raise ClusterError(
            f"the {job.label} job {outcome.job_id} ended {outcome.status} without a result"
            + (f": {outcome.message}" if outcome.message else "")
        )
    return result
