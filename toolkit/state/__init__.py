"""What rtk keeps on the machine it runs on, per cluster.

Its directory and records (``store``, ``cluster_state``), and the cluster's CA and
certificates there (``tls``).
"""
