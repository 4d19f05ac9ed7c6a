"""report/plots/*.png: one module a plot, and ``draw.write_plots`` that draws them all.

``power``, ``heatmap``, ``distribution``, ``step_energy`` and ``utilization``, each
named after its PNG; ``axes`` holds what they share (barrier lines, the time axis,
node labels and totals, empty panels).
"""
