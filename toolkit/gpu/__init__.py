"""GPU limits: power limits and locked clocks through NVML, always put back.

``limits.py`` is the one interface (``GpuLimits``, the put-back's ``GpuRestore``) with
its two paths: over SSH from this machine (``limits_over_ssh.py``: ``rtk profile``,
``rtk up``'s put-back) and a Ray task on each node (``toolkit.power.ask``: a job's power
policy). Both run the node script ``toolkit/node/gpu_control.py`` (stdlib and pynvml
only), the one owner of the restore file.
"""
