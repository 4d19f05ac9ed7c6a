"""The stall watchdog: notice that a run has stopped making progress, and say where.

- ``records``: what ``stall.json`` keeps (each rank's evidence, each node's answer, the
  suspects), the one owner of that format;
- ``detector``: when no rank has finished a step for longer than expected (pure: time
  is passed in);
- ``location``: where one rank is, from its stack and process state;
- ``diagnosis``: every rank's evidence grouped by where it is, the suspects named, one
  screen of text and the record ``stall.json`` keeps.

The evidence, on each node and the driver's collection of it:

- ``stacks``: a rank's Python stack, by py-spy, else the rank's own faulthandler;
- ``procs``: a rank's process state from /proc, telling a reused pid from the rank;
- ``node_evidence``: one node's ranks (from their marker files), in a Ray task there;
- ``collect``: every node asked at once from the driver, bounded in time per node.

``watchdog`` runs in the job drivers of ``rtk train`` and ``rtk torchrun``;
``check_job`` is ``rtk stall-check``'s driver: the same evidence, asked by hand.
"""
