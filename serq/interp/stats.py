"""Statistics (*Statistics*, *Gauges*; catalogue: the report): samples after warm-up with their
batch-means 95% interval over 20 batches, and time averages over [warmup, end] over 20 windows."""
from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right

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
    a, b = sorted_vals[lo], sorted_vals[hi]
    if pos == lo or a == b:  # a rank hit exactly, or two equal ranks (inf among them: no inf - inf)
        return a
    return a + (b - a) * (pos - lo)


def _within(x: float, lo: float, hi: float) -> float:
    """A mean lies between the least and greatest value it averages; rounding may put it a few ulps
    outside, which this takes back, so that a constant series has its value for mean and 0 for ci95."""
    return lo if x < lo else hi if x > hi else x


def _half_width(means) -> float:
    """The batch-means 95% half-width over the 20 batch means."""
    m = _within(math.fsum(means) / BATCHES, min(means), max(means))
    var = math.fsum((x - m) ** 2 for x in means) / (BATCHES - 1)
    return T19 * math.sqrt(var / BATCHES)


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
        means.append(_within(math.fsum(chunk) / size, min(chunk), max(chunk)))
    return _half_width(means)


def summary(values) -> dict:
    n = len(values)
    if n == 0:
        return {"count": 0, "mean": None, "ci95": None, "p50": None, "p90": None, "p99": None,
                "min": None, "max": None}
    s = sorted(values)
    return {"count": n, "mean": _within(math.fsum(values) / n, s[0], s[-1]), "ci95": batch_ci(values), "p50": _pct(s, 0.5),
            "p90": _pct(s, 0.9), "p99": _pct(s, 0.99), "min": s[0], "max": s[-1]}


class TimeAverage:
    """A piecewise-constant signal's time average over [start, end], with the batch-means interval
    over 20 equal windows and the least and greatest value held for a positive time.

    Each change point keeps its time, value and the integral up to it, so a window's integral is
    two bisections at the end, whatever the number of changes."""

    __slots__ = ("start", "v", "t", "vals", "cum")

    def __init__(self, start: float, v0: float = 0.0):
        self.start = start
        self.v = v0
        self.t = array("d", [0.0])      # change times
        self.vals = array("d", [v0])    # the value from each change on
        self.cum = array("d", [0.0])    # the integral up to each change

    def set(self, t: float, v: float):
        if v == self.v:
            return
        ts = self.t
        last = ts[-1]
        if last == t:  # a second change at one instant: the instant's last state is what is held
            self.vals[-1] = v
        else:
            self.cum.append(self.cum[-1] + self.v * (t - last))
            ts.append(t)
            self.vals.append(v)
        self.v = v

    @property
    def points(self):
        return list(zip(self.t, self.vals))

    def integral(self, x: float) -> float:
        """The integral from 0 to x."""
        i = bisect_right(self.t, x) - 1
        return self.cum[i] + self.vals[i] * (x - self.t[i])

    def result(self, end: float) -> dict:
        start = self.start
        span = end - start
        if span <= 0:
            return {"mean": None, "ci95": None, "min": None, "max": None}
        edges = [start + span * i / BATCHES for i in range(BATCHES + 1)]
        ints = [self.integral(x) for x in edges]

        def mean(k0, k1, width):
            """The average over [edges[k0], edges[k1]], within the values held there for a positive time
            (none when the span is infinite)."""
            held = vs[max(0, bisect_right(ts, edges[k0]) - 1):bisect_left(ts, edges[k1])]
            x = (ints[k1] - ints[k0]) / width
            return (_within(x, min(held), max(held)) if held else x), held

        ts, vs = self.t, self.vals
        means = [mean(k, k + 1, span / BATCHES)[0] for k in range(BATCHES)]
        m, held = mean(0, BATCHES, span)
        return {"mean": m, "ci95": _half_width(means), "min": min(held) if held else None,
                "max": max(held) if held else None}


class Series:
    """Samples in the order they were recorded (time never goes back), warm-up included; those
    from `warm` on were recorded after the warm-up. `rows` keeps (time, session, turn) for --dump."""
    __slots__ = ("v", "rows", "warm", "warmup")

    def __init__(self, warmup: float, rows: bool = False):
        self.v: list = []
        self.rows = [] if rows else None
        self.warm = None
        self.warmup = warmup

    def add(self, now: float, v: float, serial=None, turn=None):
        if self.warm is None and now >= self.warmup:
            self.warm = len(self.v)
        self.v.append(v)
        if self.rows is not None:
            self.rows.append((now, serial, turn))

    def after(self) -> list:
        return self.v[self.warm:] if self.warm is not None else []

    def dump_rows(self):
        if self.warm is None:
            return []
        return [(t, s, k, v) for (t, s, k), v in zip(self.rows[self.warm:], self.v[self.warm:])]
