"""GPU settings for a run: power limits and locked clocks through NVML, always put back.

``control.py`` runs on the nodes (stdlib and pynvml only; its text is fed to
``python -`` over the transport); ``settings.py`` is rtk's side of it.
"""
