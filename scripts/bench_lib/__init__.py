"""Helpers of the benchmarks under scripts/: a throwaway stack, duty cycle, same-work ratios, and
the fleet simulator's traces (``replay``: the trace format, replay and figures) and its yardstick
(``static``: the pinned fleet before residency). The service never imports them."""
