"""A stall at the collective, from the ranks' Flight Recorders.

- ``collectives``: one rank's dump read as its collectives, and every rank's compared:
  the collective each process group is stuck at and the ranks it waits for (pure);
- ``dumps``: a node's side: it asks its ranks for their dumps and gathers them;
- ``blame``: the collectives joined with the ranks' places: the suspects they add and
  the stall's one line.
"""
