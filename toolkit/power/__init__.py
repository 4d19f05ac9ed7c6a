"""Acting on the joules a run measures: power limits chosen while the run goes.

- ``windows``: what the controllers are fed (a window of steps at one set of limits)
  and what they answer (a ``Decision``), pure and typed.
- ``optimize``: ``--power-policy optimize``, one limit for every GPU, profiled top down
  and kept (Zeus-like: least energy within a slowdown bound, or Zeus's ``eta`` cost).
- ``stragglers``: ``--power-policy stragglers``, per GPU: the GPUs that wait for the
  slowest are lowered until they stop waiting, with a slowdown guardrail.
"""
