"""What the report computes from the aligned samples: its figures.

Energy over time and the gaps in it (``curves``); per device and per node, energy,
power, throttling and the bucketed views drawn from (``energy``, ``views``); the energy
counter checked against integrated power (``crosscheck``); energy per step and per
phase (``steps``); who arrives last at the barriers (``stragglers``); the devices that
stand out (``outliers``).
"""
