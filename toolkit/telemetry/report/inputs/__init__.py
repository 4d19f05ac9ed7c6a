"""What the report reads of a run directory, put on the head's timeline.

The manifest, traces and metrics (``load``), each node's samples as per-device arrays
(``series``), every rank's markers as columns (``rank_markers``) reduced to what the
report keeps (``marker_summary``), and the run's window, steps and barriers
(``timeline``). Nothing here computes a figure; nothing holds a record per sample.
"""
