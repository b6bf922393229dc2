"""DMA queues sharing one bandwidth budget.

Transfers wait for a free queue (16 on trn1/trn2, each in order), pay a fixed setup time, then move
their bytes through a shared pipe whose capacity is all DMA engines' bandwidth (capped by HBM).
The pipe is a calendar of small time bins holding the bytes already booked in each. Because the
scheduler places instructions in program order, not time order, a transfer that becomes ready
early may land after a later-starting one was booked; the calendar lets it use whatever bandwidth
is still free in those earlier bins (backfilling), which is what makes prefetching loads overlap
stores and compute the way double buffering does on the device.
"""

from __future__ import annotations

import heapq

from accelopt_core.perfmodel.costs import DmaCost

# Width of one calendar bin. Small enough that a 64 KiB transfer spans a few bins, large enough
# that booking a transfer stays a handful of Python steps.
DMA_BIN_SECONDS = 0.25e-6
_PRUNE_EVERY = 2048
_KEEP_BINS = 1024


class DmaTimeline:
    """Books transfers onto queues and the shared-bandwidth calendar, in program order."""

    def __init__(self, queues: int, aggregate_rate: float, bin_seconds: float = DMA_BIN_SECONDS) -> None:
        self._queues: list[tuple[float, int, int]] = [(0.0, q, -1) for q in range(queues)]
        heapq.heapify(self._queues)
        self._bin = bin_seconds
        self._capacity = aggregate_rate * bin_seconds
        self._rate = aggregate_rate
        self._used: list[float] = []
        # _next[i] points (absolute index) at a later bin with room when bin i is full, else at
        # itself: a union-find skip list, so a saturated stretch is crossed in a few hops.
        self._next: list[int] = []
        self._base = 0  # calendar index of _used[0]
        self._issued = 0

    def earliest(self) -> tuple[float, int]:
        """When the next transfer could start at the soonest, and the instruction holding that queue."""
        free_at, _, holder = self._queues[0]
        return free_at, holder

    def issue(self, ready: float, cost: DmaCost, index: int) -> tuple[float, float, float]:
        """Book one transfer that may start at `ready` on the soonest free queue.

        Returns (queue start, data start, end). `index` is remembered as the queue's holder.
        """
        free_at, queue, _ = heapq.heappop(self._queues)
        start = ready if ready > free_at else free_at
        data_start, end = self._book(start + cost.fixed, cost.work_bytes, cost.rate)
        heapq.heappush(self._queues, (end, queue, index))
        self._issued += 1
        if self._issued % _PRUNE_EVERY == 0:
            self._prune()
        return start, data_start, end

    def _book(self, t0: float, work: float, rate: float) -> tuple[float, float]:
        """Pour `work` bytes into the calendar from `t0` at no more than `rate`; return (start, end)."""
        width = self._bin
        capacity = self._capacity
        full = capacity * (1.0 - 1e-12)
        used = self._used
        nxt = self._next
        base = self._base
        idx = int(t0 / width) - base
        if idx < 0:  # cannot happen: pruning keeps every bin a future transfer can reach
            idx = 0
            t0 = base * width
        t = t0
        remaining = work
        data_start = -1.0
        while True:
            if idx >= len(nxt) or nxt[idx] != base + idx:  # full or beyond the calendar: look further
                open_idx = self._open_from(idx)
                if open_idx != idx:
                    idx = open_idx
                    t = (base + idx) * width
            booked = used[idx]
            bin_start = (base + idx) * width
            bin_end = bin_start + width
            take = rate * (bin_end - t)
            free = capacity - booked
            if take > free:
                take = free
            if take > 0.0:
                if data_start < 0.0:
                    data_start = t
                if take >= remaining:
                    booked += remaining
                    used[idx] = booked
                    if booked >= full:
                        nxt[idx] = base + idx + 1
                    end = t + remaining / rate
                    shared_end = bin_start + booked / self._rate
                    return data_start, end if end > shared_end else shared_end
                booked += take
                used[idx] = booked
                if booked >= full:
                    nxt[idx] = base + idx + 1
                remaining -= take
            idx += 1
            t = bin_end

    def _open_from(self, idx: int) -> int:
        """The first bin at or after `idx` (relative) that still has room, growing the calendar."""
        nxt = self._next
        base = self._base
        root = idx
        while True:
            if root >= len(nxt):
                grow = root - len(nxt) + 256
                self._used.extend([0.0] * grow)
                nxt.extend(range(base + len(nxt), base + len(nxt) + grow))
                break
            hop = nxt[root] - base
            if hop == root:
                break
            root = hop
        while idx != root:  # path compression
            hop = nxt[idx] - base
            nxt[idx] = root + base
            idx = hop
        return root

    def _prune(self) -> None:
        """Forget bins no future transfer can reach: before the earliest free queue."""
        horizon = self._queues[0][0]
        cut = int(horizon / self._bin) - self._base - _KEEP_BINS
        if cut > _KEEP_BINS:
            del self._used[:cut]
            del self._next[:cut]
            self._base += cut
