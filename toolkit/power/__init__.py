"""Acting on the joules a run measures: power limits chosen while the run goes.

- ``windows``: what the controllers are fed (a window of steps at one set of limits)
  and what they answer (a ``Decision``), pure and typed.
"""
