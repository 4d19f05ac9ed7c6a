"""NVML's clocks-event reason bits (docs/telemetry.md): their names, and which ones throttle.

Shared by the report (throttled time per device) and preflight's load test, without
either importing the other.
"""

from __future__ import annotations

CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# Set bits that do not make a sample throttled.
NOT_THROTTLING = 0x1 | 0x2 | 0x10 | 0x100
