"""A cluster: its plan, the questions rtk asks it, and how to reach it.

The plan: each node's role, commands, ports and containers. The questions: Ray's
status, a smoke task, a command on each node. Bringing Ray up and down on the nodes is
``toolkit.lifecycle``'s.
"""
