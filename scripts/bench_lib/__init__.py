"""Helpers of the benchmarks under scripts/ (a throwaway stack, duty cycle, same-work ratios)."""
