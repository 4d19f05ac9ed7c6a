"""``rtk profile``: a power-profiling sweep (a matrix of training runs) and its results."""
