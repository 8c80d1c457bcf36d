"""Statistics (*Statistics*, *Gauges*; catalogue: the report): samples after warm-up with their
batch-means 95% interval over 20 batches, and time averages over [warmup, end] over 20 windows."""
from __future__ import annotations

import math

BATCHES = 20
# Student's t, 0.975 quantile, 19 degrees of freedom (20 batches)
T19 = 2.093024054408263


def _pct(sorted_vals, q):
    """The q-quantile by linear interpolation between closest ranks."""
    n = len(sorted_vals)
    if n == 1:
        return sorted_vals[0]
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def batch_ci(values) -> float | None:
    """The half-width of the batch-means 95% interval: the samples in time order cut into 20
    contiguous batches of equal size (the first `n mod 20` samples left out); None below 2 a batch."""
    n = len(values)
    size = n // BATCHES
    if size < 2:
        return None
    start = n - size * BATCHES
    means = []
    for b in range(BATCHES):
        chunk = values[start + b * size:start + (b + 1) * size]
        means.append(math.fsum(chunk) / size)
    m = math.fsum(means) / BATCHES
    var = math.fsum((x - m) ** 2 for x in means) / (BATCHES - 1)
    return T19 * math.sqrt(var / BATCHES)


def summary(values) -> dict:
    n = len(values)
    if n == 0:
        return {"count": 0, "mean": None, "ci95": None, "p50": None, "p90": None, "p99": None,
                "min": None, "max": None}
    s = sorted(values)
    return {"count": n, "mean": math.fsum(values) / n, "ci95": batch_ci(values), "p50": _pct(s, 0.5),
            "p90": _pct(s, 0.9), "p99": _pct(s, 0.99), "min": s[0], "max": s[-1]}


class TimeAverage:
    """A piecewise-constant signal's time average over [start, end], with the batch-means interval
    over 20 equal windows and the least and greatest value held for a positive time."""

    __slots__ = ("start", "v", "points")

    def __init__(self, start: float, v0: float = 0.0):
        self.start = start
        self.v = v0
        self.points = [(0.0, v0)]   # change points (time, value)

    def set(self, t: float, v: float):
        if v == self.v:
            return
        pts = self.points
        if pts[-1][0] == t:
            pts[-1] = (t, v)
            if len(pts) > 1 and pts[-2][1] == v:
                pts.pop()
        else:
            pts.append((t, v))
        self.v = v

    def result(self, end: float) -> dict:
        start = self.start
        span = end - start
        if span <= 0:
            return {"mean": None, "ci95": None, "min": None, "max": None}
        pts = self.points
        # the value held on [start, end]: integrate each window
        edges = [start + span * i / BATCHES for i in range(BATCHES + 1)]
        win = [0.0] * BATCHES
        total = 0.0
        lo = hi = None
        for i, (t0, v) in enumerate(pts):
            t1 = pts[i + 1][0] if i + 1 < len(pts) else end
            a, b = max(t0, start), min(t1, end)
            if b <= a:
                continue
            lo = v if lo is None else min(lo, v)
            hi = v if hi is None else max(hi, v)
            total += v * (b - a)
            w = min(BATCHES - 1, int((a - start) / span * BATCHES))
            while w > 0 and edges[w] > a:
                w -= 1
            while w < BATCHES and edges[w] < b:  # spread over the windows it covers
                x0, x1 = max(a, edges[w]), min(b, edges[w + 1])
                if x1 > x0:
                    win[w] += v * (x1 - x0)
                w += 1
        mean = total / span
        wl = span / BATCHES
        means = [x / wl for x in win]
        m = math.fsum(means) / BATCHES
        var = math.fsum((x - m) ** 2 for x in means) / (BATCHES - 1)
        return {"mean": mean, "ci95": T19 * math.sqrt(var / BATCHES), "min": lo, "max": hi}
