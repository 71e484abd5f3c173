"""What else ran on the worker's host while a job loaded and generated: a noisy sample is recognisable.

A regression batch compares times measured on a host that also runs other things: this worker's
own finishing of earlier jobs (the gate's ffmpeg decode and detectors, an encoder flush, uploads),
other workers' jobs and their finishing, the API. The window opens before the model is fetched
from residency and closes after the last frame, and records:

* ``busy_cores``: the average number of CPU cores busy on the whole host (``/proc/stat``; None
  where there is none);
* ``own_cores``: this worker process and the children it reaped in the window (a per-run back
  end's model process, torchrun's ranks), from ``os.times``;
* ``other_cores``: the rest, ``busy_cores - own_cores`` (never below 0): other processes;
* ``finishing_jobs`` / ``finishing_ms``: this worker's finisher overlapping the window (its ffmpeg
  children count as own once reaped, so they are named here instead).

A sample is ``disturbed`` when this worker finished another job beside it, or when other processes
kept at least ``DISTURBED_SHARE`` of the host's cores busy on average. The figures are averages
over the window: a short burst of other work in a long run reads small, as its effect on the
run's time does.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from jobservice.reports.run_report import HostActivity
from workers.finisher import Finisher

DISTURBED_SHARE = 0.10  # of the host's cores, busy with other processes on average
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def host_cpu_seconds() -> float | None:
    """CPU seconds the whole host has been busy since boot, over all cores (None without /proc)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    values = [int(v) for v in fields[1:9]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / _TICKS


def own_cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of the children it has reaped."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class HostWindow:
    """Opened when a run starts using its card; ``close`` gives the run's ``HostActivity``."""

    finisher: Finisher | None
    undisturbed: bool = False  # the run waited for this worker's finishing to end first
    waited_ms: float = 0.0

    def __post_init__(self) -> None:
        self.started = time.perf_counter()
        self.host0 = host_cpu_seconds()
        self.own0 = own_cpu_seconds()

    def close(self) -> HostActivity:
        """The activity from the opening until now."""
        ended = time.perf_counter()
        wall = max(ended - self.started, 1e-6)
        host1, own1 = host_cpu_seconds(), own_cpu_seconds()
        cpus = os.cpu_count() or 1
        own = (own1 - self.own0) / wall
        busy = None if host1 is None or self.host0 is None else (host1 - self.host0) / wall
        other = None if busy is None else max(0.0, busy - own)
        jobs, seconds = self.finisher.busy_between(self.started, ended) if self.finisher else (0, 0.0)
        disturbed = jobs > 0 or (other is not None and other >= DISTURBED_SHARE * cpus)
        return HostActivity(
            window_ms=round(wall * 1000, 3),
            cpu_count=cpus,
            busy_cores=None if busy is None else round(busy, 3),
            own_cores=round(own, 3),
            other_cores=None if other is None else round(other, 3),
            finishing_jobs=jobs,
            finishing_ms=round(seconds * 1000, 3),
            undisturbed=self.undisturbed,
            waited_ms=round(self.waited_ms, 3),
            disturbed=disturbed,
            load_1m=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        )
