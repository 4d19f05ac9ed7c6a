"""report/trace.json.gz: the aligned timeline as Chrome trace events, for Perfetto.

``export`` writes it, event by event (``events``, the file format), from each device's
counter tracks (``counters``) and each rank's steps and barrier waits (``slices``).
"""
