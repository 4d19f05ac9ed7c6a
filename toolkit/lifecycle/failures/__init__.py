"""Why nodes did not come up.

``causes``: the cause of each, read from its facts and Ray's output; ``missing``: the
text of a bring-up that fell short, and the nodes asked why they did not join.
"""
