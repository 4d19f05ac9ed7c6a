"""A cluster's credentials: Ray's token and TLS files, and what uses them here.

A new set of them on a stopped cluster (``rotate``), and the variables that point Ray's
own CLI and SDK at the cluster (``client_env``). The files themselves are the state
directory's (``toolkit.state.tls``).
"""
