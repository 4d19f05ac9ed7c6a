"""``rtk torchrun``: one torchrun per node of an rtk cluster, under rtk's telemetry.

``spec`` is the request as data (pure: what ``--dry-run`` prints), ``node_runner`` the
Ray actor that runs torchrun on its node, ``fanout`` the job's driver on the head that
checks every node, starts them all, and stops them all.
"""
