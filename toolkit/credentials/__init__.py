"""A cluster's credentials: Ray's token and TLS files, and what uses them here.

The CA and certificates (``tls``), a new set on a stopped cluster (``rotate``), and
the variables that point Ray's own CLI and SDK at the cluster (``client_env``).
"""
