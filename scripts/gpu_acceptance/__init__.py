"""rtk's GPU acceptance: every GPU path of rtk, measured in one bounded command.

``bash scripts/gpu-acceptance.sh`` runs ``python -m gpu_acceptance`` with ``scripts/``
on ``PYTHONPATH``. The runner (``runner.py``) probes the machine (``machine.py``),
installs what is missing (``install.py``), then runs each stage of ``stages/`` in its
own process group with a timeout (``stage.py``), and writes one JSON record and a
markdown summary (``record.py``, ``markdown.py``). On a machine without a GPU, or with
``--dry-run``, nothing is installed and every stage is listed as skipped.

This package is not part of the installed toolkit: it lives beside it in ``scripts/``.
"""

from __future__ import annotations
