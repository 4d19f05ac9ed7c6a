"""The stall watchdog: notice that a run has stopped making progress, and say where.

- ``records``: what ``stall.json`` keeps (each rank's evidence, each node's answer, the
  suspects), the one owner of that format;
- ``detector``: when no rank has finished a step for longer than expected (pure: time
  is passed in);
- ``location``: where one rank is, from its stack and process state;
- ``diagnosis``: every rank's evidence grouped by where it is, the suspects named, one
  screen of text and the record ``stall.json`` keeps.

The evidence itself is collected on the nodes by the package's collection modules;
the job drivers run the watchdog.
"""
