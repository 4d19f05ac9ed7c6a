"""``rtk exec``'s runs: one per node, and the JSON ``--json`` prints of them."""

from __future__ import annotations

import json

from toolkit.cluster.command import NodeRun, runs_to_json


def test_exec_json_keeps_every_field_of_every_run_and_lists_the_failed() -> None:
    runs = [
        NodeRun("n1", 0, "ok\n", "", 0.25),
        NodeRun("n2", 3, "", "boom\n", 1.5),
        NodeRun("n3", None, error="n3: SSH to 10.0.0.3 timed out"),
    ]
    assert json.dumps(runs_to_json(runs)) == json.dumps(
        {
            "nodes": [
                {
                    "node": "n1",
                    "exit_code": 0,
                    "stdout": "ok\n",
                    "stderr": "",
                    "duration_s": 0.25,
                    "error": None,
                },
                {
                    "node": "n2",
                    "exit_code": 3,
                    "stdout": "",
                    "stderr": "boom\n",
                    "duration_s": 1.5,
                    "error": None,
                },
                {
                    "node": "n3",
                    "exit_code": None,
                    "stdout": "",
                    "stderr": "",
                    "duration_s": 0.0,
                    "error": "n3: SSH to 10.0.0.3 timed out",
                },
            ],
            "failed": ["n2", "n3"],
        }
    )
