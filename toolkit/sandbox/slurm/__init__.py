"""SLURM in a sandbox: its files, ports and config text (``conf``), its host daemons (``daemons``).

With ``create(..., slurm=True)`` the sandbox runs a real SLURM cluster: one ``munged``
and one ``slurmctld`` on the host (the controller listens on every host address; the
nodes reach it at the bridge address), and a ``slurmd -N node<i>`` inside each node,
started by the node's init. Everything lives in the sandbox directory::

    munge/   munge.key, munge.socket, munged.pid, munged.log, munged.seed
    slurm/   etc/slurm.conf, etc/cgroup.conf, state/, slurmctld.pid, slurmctld.log

Nodes see ``slurm/etc`` read-only as their ``/etc/slurm``, so ``sinfo`` in a node
(over SSH, say) needs no ``SLURM_CONF``; on the host, set ``SLURM_CONF`` to
``slurm/etc/slurm.conf`` (``Sandbox.slurm_env()``). A slurmd keeps its spool, PID file
and log in its node's private ``/run/slurmd``. Ports derive from the subnet, so
sandboxes on different subnets do not collide.
"""
