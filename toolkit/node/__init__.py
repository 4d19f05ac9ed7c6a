"""The scripts that run on the nodes: standard library only, never imported by rtk.

Each script's text is fed to the node's own Python as ``python - ARGS`` (no rtk
installed there) by ``toolkit.nodeinfo.script.NodeScript``, which puts ``common.py``,
the pieces the scripts share, in front of it as it sends it:

- ``agent.py``: probe a node before Ray starts, stop rtk's processes, Ray's node
  list, a smoke task per node, pack a run's results;
- ``facts.py``: what preflight grades on a node;
- ``logpack.py``: pack a node's Ray and rtk logs, bounded, for a bug report;
- ``gpu_control.py``: GPU power limits and locked clocks, recorded and put back;
- ``common.py``: the shared pieces (the ``main`` of a script, the RDMA ports' files,
  the digest of rtk's source); stdlib only too, so rtk's host code may import it.

rtk's side of them (the command lines, the typed records their answers are read into)
is ``toolkit.nodeinfo``.
"""
