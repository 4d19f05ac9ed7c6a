"""A cluster's life on its nodes: Ray brought up and taken down, and its logs fetched.

Ray brought up (``start``; one node's steps in ``node_start``; why a node did not come
up in ``failures``), taken down (``down``), and the nodes' Ray logs brought back
(``ray_logs``). What the cluster is, and the questions rtk asks it, sit below in
``toolkit.cluster``.
"""
