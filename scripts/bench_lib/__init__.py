"""Helpers of the benchmarks under scripts/: a throwaway stack, duty cycle, same-work ratios, and
the fleet simulator's traces (``replay``: the trace format, replay and figures) and its yardstick
(``static``: the pinned fleet before residency). The service never imports them."""

# The environment that takes quotas, rate limits and the free-space floor out of a benchmark's way
# (it measures the service's own work, not its refusals).
QUOTAS_OFF = {
    "JOBSERVICE_AUTH": "off",
    "JOBSERVICE_QUOTA_ACTIVE_JOBS": "10000000",
    "JOBSERVICE_QUOTA_JOBS_PER_HOUR": "10000000",
    "JOBSERVICE_QUOTA_REQUESTS_PER_MINUTE": "0",
    "JOBSERVICE_MIN_FREE_MB": "0",
}
