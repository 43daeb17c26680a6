"""How many processes an index build should prepare batches with: the cores nobody else is using,
read from /proc/stat (niced time counts as idle), sampled while the first batch is prepared
(`CoreSample`) or over a short window (`busy_cores_now`); MEMCTL_INDEX_WORKERS overrides.
memctl.recall.indexing.prepare's pool asks.
"""

from __future__ import annotations

import os
import time


def forced_preparers() -> int | None:
    """MEMCTL_INDEX_WORKERS: the preparing processes asked for, the command included (None: decide)."""
    override = os.environ.get("MEMCTL_INDEX_WORKERS", "")
    return int(override) if override.isdigit() else None


def usable_cores(sample: CoreSample | None = None) -> int:
    """How many processes should prepare batches (a pool forks that many, this process
    inserting beside them: Preparer._workers_to_fork): this process's core, plus those that
    nobody else is using (from `sample`, else a fresh
    0.1 s one; the load average where there is no /proc/stat). MEMCTL_INDEX_WORKERS overrides;
    1 = no pool. On a machine already busy, a
    pool only adds its own costs (fork, pickling, pages copied on write): measured on 2 shared
    cores at load 5-8, serial builds finished sooner (bench/RESULTS.md)."""
    forced = forced_preparers()
    if forced is not None:
        return forced
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    others = sample.others(cores) if sample is not None else busy_cores_now(cores)
    if others is None:
        try:
            others = os.getloadavg()[0]
        except (AttributeError, OSError):  # none on Windows
            others = 0.0
    return max(1, min(cores, round(cores - others + 1)))


def _cpu_ticks() -> tuple[int, int] | None:
    """(all, idle) clock ticks of every core since boot, from /proc/stat; None without it.
    Niced processes' time counts as idle: they yield to a build (a background embedding at
    nice 10 kept builds on one core, where it took little from them)."""
    try:
        with open("/proc/stat", "rb") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
        idle = fields[1] + fields[3] + (fields[4] if len(fields) > 4 else 0)  # nice + idle + iowait
        return sum(fields[:8]), idle  # user..steal: guest time is already inside user
    except (OSError, ValueError, IndexError):
        return None


class CoreSample:
    """How busy the cores are between its start and `others()`, less this process's own CPU:
    taken while the pass reads and prepares its first batch, so that nothing waits for it."""

    TELLING_TICKS = 4  # clock ticks (10 ms each, summed over the cores) that say enough
    PATIENCE = 3  # batches prepared here waiting for them, at most

    def __init__(self):
        self.ticks = _cpu_ticks()
        self.cpu, self.wall = time.process_time(), time.monotonic()

    def telling(self, batches_waited: int) -> bool:
        """Whether enough time has passed to tell (or the wait has been long enough)."""
        if self.ticks is None or batches_waited >= self.PATIENCE:
            return True
        now = _cpu_ticks()
        return now is None or now[0] - self.ticks[0] >= self.TELLING_TICKS

    def others(self, cores: int) -> float | None:
        """How many of `cores` other processes kept busy meanwhile; None when unknown."""
        now = _cpu_ticks()
        if self.ticks is None or now is None:
            return None
        elapsed = now[0] - self.ticks[0]
        if elapsed <= 0:
            return 0.0
        busy = cores * (elapsed - (now[1] - self.ticks[1])) / elapsed
        own = (time.process_time() - self.cpu) / max(time.monotonic() - self.wall, 1e-3)
        return max(0.0, busy - own)


def busy_cores_now(cores: int, window: float = 0.1) -> float | None:
    """How many of `cores` other processes keep busy right now, from /proc/stat over `window`
    seconds (this process sleeps meanwhile); None where there is no /proc/stat. Not the load
    average: it still counts for a minute a process that has just ended, which kept a build
    serial on an idle machine right after another command (bench/RESULTS.md)."""
    before = _cpu_ticks()
    if before is None:
        return None
    time.sleep(window)
    after = _cpu_ticks()
    if after is None or after[0] <= before[0]:
        return None
    elapsed = after[0] - before[0]
    return cores * (elapsed - (after[1] - before[1])) / elapsed
