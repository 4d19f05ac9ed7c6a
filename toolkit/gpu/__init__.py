"""GPU settings for a run: power limits and locked clocks through NVML, always put back.

``settings.py`` is rtk's side; the node script it runs on every GPU node (stdlib and
pynvml only) is ``toolkit/node/gpu_control.py``.
"""
