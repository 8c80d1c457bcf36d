"""Statistics (*Statistics*, *Gauges*; catalogue: the report): samples after warm-up with their
batch-means 95% interval over 20 batches, and time averages over [warmup, end] over 20 windows."""
from __future__ import annotations

import math
import sys
import tempfile
import weakref
from array import array
from bisect import bisect_left, bisect_right
from functools import reduce
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, ne, sub
from struct import Struct

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


_ULP = 1 << 1074  # every finite float is a whole number of 2**-1074


class _Exact:
    """An exact sum, where math.fsum raises: the finite values as a whole number of 2**-1074, the
    others as fsum takes them (an infinity decides the sum; NaN, or inf with -inf, makes it NaN)."""
    __slots__ = ("n", "special")

    def __init__(self):
        self.n = 0
        self.special = 0.0

    def add(self, xs):
        n, special = self.n, self.special
        for x in xs:
            if math.isfinite(x):
                m, d = x.as_integer_ratio()  # d a power of two, at most 2**1074
                n += m * (_ULP // d)
            else:
                special += x
        self.n, self.special = n, special

    def add_times(self, xs, ks):
        """add() of each x repeated k times (x * k exactly; a non-finite x as one)."""
        n, special = self.n, self.special
        for x, k in zip(xs, ks):
            if math.isfinite(x):
                m, d = x.as_integer_ratio()
                n += m * k * (_ULP // d)
            else:
                special += x
        self.n, self.special = n, special

    def total(self) -> float:
        """The sum correctly rounded, as math.fsum gives it where it does not raise: +-inf beyond
        the float range."""
        if self.special != 0.0:
            return self.special
        try:
            return self.n / _ULP  # int / int: correctly rounded
        except OverflowError:
            return math.inf if self.n > 0 else -math.inf

    def mean(self, count: int) -> float:
        """total() / count, as math.fsum(xs) / count gives it where fsum does not raise; where the
        sum is beyond the float range, the exact mean rounded once (it is within the range)."""
        if self.special != 0.0:
            return self.special / count
        try:
            return (self.n / _ULP) / count
        except OverflowError:
            return self.n / (count * _ULP)


def sum_of(xs) -> float:
    """math.fsum(xs), total: where fsum raises (finite partial sums beyond the float range: an
    OverflowError even when the whole sum is within it; inf with -inf: ValueError), the exact sum
    correctly rounded (+-inf beyond the range; NaN for inf with -inf). xs is read twice at most."""
    try:
        return math.fsum(xs)
    except (OverflowError, ValueError):
        e = _Exact()
        e.add(xs)
        return e.total()


def mean_of(xs, n: int) -> float:
    """math.fsum(xs) / n, total as sum_of is, and within the float range where the values are (the
    exact mean rounded once when their sum is beyond it; a spilled column's is _Acc's, the same).
    xs is read twice at most."""
    try:
        return math.fsum(xs) / n
    except (OverflowError, ValueError):
        e = _Exact()
        e.add(xs)
        return e.mean(n)


def square(d: float) -> float:
    try:
        return d ** 2
    except OverflowError:  # beyond the float range: inf, as a correctly rounded square is
        return math.inf


def squares(devs) -> tuple:
    """(s, q): s * s * q is the sum of the squares of devs. Where math.fsum of the squares is a float
    (the common case), s is 1.0 and q that sum; where a square or their sum is beyond the float range,
    s is the largest deviation and q the sum of the scaled squares, so that s * sqrt(q / k) is within
    the range where it is (an interval's half-width, a standard deviation)."""
    try:
        return 1.0, math.fsum([d ** 2 for d in devs])
    except OverflowError:
        s = max(abs(d) for d in devs)
        if not math.isfinite(s) or any(d != d for d in devs):  # inf or NaN among them decides
            return 1.0, sum_of([square(d) for d in devs])
        return s, math.fsum([(d / s) ** 2 for d in devs])


def _half_width(means) -> float:
    """The batch-means 95% half-width over the 20 batch means."""
    m = _within(mean_of(means, BATCHES), min(means), max(means))
    s, q = squares([x - m for x in means])
    var = q / (BATCHES - 1)
    return T19 * (s * math.sqrt(var / BATCHES))  # s is 1.0 but beyond the float range


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
        means.append(_within(mean_of(chunk, size), min(chunk), max(chunk)))
    return _half_width(means)


# the percentiles a summary gives unless asked for others (`serq run --percentiles`)
PERCENTILES = (50.0, 90.0, 99.0)


def pct_key(p: float) -> str:
    """A percentile's field: 99 -> p99, 99.9 -> p99.9."""
    return "p" + f"{p:.6f}".rstrip("0").rstrip(".")


def _figures_of(n, mean, std, ci, pcts, pct, lo, hi) -> dict:
    """A summary's fields in the report's order; pct(q) the q-quantile."""
    out = {"count": n, "mean": mean, "std": std, "ci95": ci}
    for p in pcts:
        out[pct_key(p)] = pct(p / 100) if n else None
    out["min"], out["max"] = lo, hi
    return out


def _std(m, n, lo, hi, pieces) -> float | None:
    """The population standard deviation (numpy's std, as vLLM's client reports it) about the mean m
    of n samples in [lo, hi], given as `pieces()`: (values, counts or None) each. The mean of the
    squared deviations is an exact sum correctly rounded (_WAcc's, mean_of's): the same to the last
    bit however the samples are held (a list, runs, chunks on disk). Where a square leaves the float
    range, the deviations are scaled by the largest, max(m - lo, hi - m), first. None where the
    mean is not finite (an infinite sample)."""
    if not n or not math.isfinite(m):
        return None
    for s in (1.0, max(m - lo, hi - m)):
        if math.isinf(s):  # deviations beyond the float range
            return math.inf
        acc = _WAcc()
        try:
            for vs, ks in pieces():
                sq = [((v - m) / s) ** 2 for v in vs] if s != 1.0 else [(v - m) ** 2 for v in vs]
                if ks is None:
                    acc.feed(sq)
                else:
                    acc.feed_runs(sq, ks)
        except OverflowError:  # a square beyond the float range: scaled
            continue
        var = acc.raw_mean(n)
        if math.isfinite(var):
            return s * math.sqrt(var)
    return math.inf


def summary(values, pcts=PERCENTILES) -> dict:
    if isinstance(values, Runs):
        return summary_runs(values, pcts)
    if isinstance(values, Spilled):
        return _summary_spilled(values, pcts)
    n = len(values)
    if n == 0:
        return _figures_of(0, None, None, None, pcts, None, None, None)
    s = sorted(values)
    mean = _within(mean_of(values, n), s[0], s[-1])
    return _figures_of(n, mean, _std(mean, n, s[0], s[-1], lambda: [(values, None)]), batch_ci(values), pcts,
                       lambda q: _pct(s, q), s[0], s[-1])


_ONES = array("d", [1.0]) * 4096  # split_all's values, a slice of it


class TimeAverage:
    """A piecewise-constant signal's time average over [start, end], with the batch-means interval
    over 20 equal windows and the least and greatest value held for a positive time.

    Each change point keeps its time, value and the integral up to it, so a window's integral is
    two bisections at the end, whatever the number of changes. Past SWITCH change points, all but
    the last go to disk (Column), and the end reads them back in one pass: the same figures."""

    __slots__ = ("start", "v", "t", "vals", "cum", "disk", "cap", "last", "acc")

    def __init__(self, start: float, v0: float = 0.0):
        self.start = start
        self.v = v0
        self.t = array("d", [0.0])      # change times
        self.vals = array("d", [v0])    # the value from each change on
        self.cum = array("d", [0.0])    # the integral up to each change
        self.disk = None                # (times, values, integrals) on disk, once spilled
        self.cap = SWITCH
        self.last = 0.0                 # the last change's time and integral (t[-1], cum[-1])
        self.acc = 0.0

    def set(self, t: float, v: float):
        # queueing.py's event loop writes this out for each gauge (_loop): a change here goes there
        if v == self.v:
            return
        last = self.last
        if last == t:  # a second change at one instant: the instant's last state is what is held
            self.vals[-1] = v
        else:
            self.acc = acc = self.acc + self.v * (t - last)
            self.last = t
            self.cum.append(acc)
            ts = self.t
            ts.append(t)
            self.vals.append(v)
            if len(ts) >= self.cap:
                self._flush()
        self.v = v

    def split(self, t: float):
        """set(t, 0.0) then set(t, 1.0) on a signal at 1.0 (a busy stage that idles and starts again
        at one instant): a change point at t, its integral summed there, the value unchanged."""
        if self.v != 1.0:
            self.set(t, 0.0)
            self.set(t, 1.0)
            return
        last = self.last
        if last != t:
            self.acc = acc = self.acc + (t - last)  # 1.0 * (t - last)
            self.last = t
            self.cum.append(acc)
            ts = self.t
            ts.append(t)
            self.vals.append(1.0)
            if len(ts) >= self.cap:
                self._flush()

    def split_all(self, times):
        """split(t) for each of times in order: where the signal is at 1.0 and the times rise
        strictly from the last change, their change points and integrals at once (the same
        additions, acc + (t - last), in the same order: itertools.accumulate)."""
        k = len(times)
        if not k:
            return
        self.split_diffs(times, list(map(sub, times, chain((self.last,), islice(times, 0, k - 1)))))

    def split_diffs(self, times, diffs):
        """split_all(times) where diffs are already each time less the one before it (the first less
        the last change): a fast-forward's gaps (enginepath.py)."""
        k = len(times)
        if not k:
            return
        # rising strictly from the last change: each difference above 0 (two finite floats apart
        # differ by more than 0; inf less inf is nan)
        if self.v != 1.0 or not min(diffs) > 0.0:
            for t in times:
                self.split(t)
            return
        cum = list(accumulate(diffs, initial=self.acc))
        del cum[0]
        # fromlist and an array's slice: an array's extend by a list or an iterator reads each item
        # generically, twice the time (a fast-forward's ends: ~6% of vllm_single_turn.sq's run)
        self.t.fromlist(times if times.__class__ is list else list(times))
        self.vals.extend(_ONES[:k] if k <= len(_ONES) else array("d", repeat(1.0, k)))
        self.cum.fromlist(cum)
        self.acc = cum[-1]
        self.last = times[-1]
        if len(self.t) >= self.cap:
            self._flush()

    def rise(self, times: list, vals: list):
        """set(t, v) for each (t, v) in order, where the times rise strictly from the last change and
        each v differs from the one before it (a stretch's growth instants, enginepath.py): the
        same additions, acc + v * (t - last), in the same order. (A loop: a stretch gives a few
        points, ~8, where iterator chains cost more to set up than they save.)"""
        acc, last, v = self.acc, self.last, self.v
        cum = []
        app = cum.append
        for t, x in zip(times, vals):
            acc = acc + v * (t - last)
            app(acc)
            last = t
            v = x
        self.add_points(times, vals, cum)

    def add_points(self, times: list, vals: list, cum: list):
        """rise(times, vals) whose integrals, cum, the caller summed as rise does (enginepath.py's
        growths, in the loop that makes their points)."""
        if not times:
            return
        _put(self.t, times)
        _put(self.vals, vals)
        _put(self.cum, cum)
        self.acc = cum[-1]
        self.last = times[-1]
        self.v = vals[-1]
        if len(self.t) >= self.cap:
            self._flush()

    def follow(self, src, k: int):
        """rise() by src's last k change points, where src held this one's last change, value and
        integral before them (a pool's time average and a gauge of its used, enginepath.py): the
        same additions on the same numbers, so the integrals are src's, copied."""
        self.t.extend(src.t[-k:])
        self.vals.extend(src.vals[-k:])
        self.cum.extend(src.cum[-k:])
        self.acc = src.acc
        self.last = src.last
        self.v = src.v
        if len(self.t) >= self.cap:
            self._flush()

    def _flush(self):
        """All but the last change point onto disk (the last may still change at its instant)."""
        if self.disk is None:
            self.disk = (Column("d"), Column("d"), Column("d"))
            self.cap = CHUNK
        for col, a in zip(self.disk, (self.t, self.vals, self.cum)):
            col.buf.extend(a[:-1])
            col.flush()
            del a[:-1]

    def _columns(self):
        """(times, values, integrals) chunk by chunk, in order, disk then memory."""
        if self.disk is not None:
            yield from zip(*(c.chunks() for c in self.disk))
        yield self.t, self.vals, self.cum

    @property
    def points(self):
        if self.disk is None:
            return list(zip(self.t, self.vals))
        return ((t, v) for ts, vs, _ in self._columns() for t, v in zip(ts, vs))

    def integral(self, x: float) -> float:
        """The integral from 0 to x."""
        i = bisect_right(self.t, x) - 1
        return self.cum[i] + self.vals[i] * (x - self.t[i])

    def mean_to(self, end: float):
        """result(end)'s mean alone (a stage's utilisation; BusyAverage keeps no more)."""
        return self.result(end)["mean"]

    def result(self, end: float) -> dict:
        start = self.start
        span = end - start
        if span <= 0:
            return {"mean": None, "ci95": None, "min": None, "max": None}
        if span * BATCHES < math.inf:
            edges = [start + span * i / BATCHES for i in range(BATCHES + 1)]
        else:  # span * i would overflow (a span near the float range's end): a window's width times i
            edges = [start + span / BATCHES * i for i in range(BATCHES)] + [end]
        if self.disk is not None:
            if math.isfinite(span):
                return self._result_spilled(edges, span)
            self.t, self.vals, self.cum = (array("d", (x for a in cs for x in a)) for cs in
                                           zip(*self._columns()))  # an infinite span: read it all back
            self.disk = None
        ints = [self.integral(x) for x in edges]
        ts, vs = self.t, self.vals
        # the values held within each window for a positive time (none when the span is infinite):
        # the change points from the last at or before its start to the last before its end. The
        # windows' ranges join up into the whole span's (a window starts where the one before ends,
        # or one point earlier), so its least and greatest are theirs
        los, his = [], []
        np = _numpy() if len(vs) >= NP_RUNS else sys.modules.get("numpy")  # (its import paid where it pays)
        for k in range(BATCHES):
            held = vs[max(0, bisect_right(ts, edges[k]) - 1):bisect_left(ts, edges[k + 1])]
            if held:
                lo, hi = _lo_hi(held, np)
                los.append(lo)
                his.append(hi)
            else:
                los.append(None)
                his.append(None)

        def mean(x, lo, hi):
            return x if lo is None else _within(x, lo, hi)

        width = span / BATCHES
        ci = None
        if width > 0:  # a span of a few subnormals is not cut into 20 windows: no interval
            ci = _half_width([mean((ints[k + 1] - ints[k]) / width, los[k], his[k]) for k in range(BATCHES)])
        lo = min((x for x in los if x is not None), default=None)
        hi = max((x for x in his if x is not None), default=None)
        return {"mean": mean((ints[BATCHES] - ints[0]) / span, lo, hi), "ci95": ci, "min": lo, "max": hi}

    def _result_spilled(self, edges, span):
        """result() over change points on disk, in one pass of CHUNK: per edge the last change at or
        before it (its integral, and the value it holds from there), per window the least and
        greatest value changed to strictly inside it; the same arithmetic as in memory."""
        last = [None] * len(edges)   # per edge: (time, value, integral) of the last change <= it
        wins = [(k, k + 1) for k in range(BATCHES)] + [(0, BATCHES)]
        inside = [[None, None] for _ in wins]  # per window: least, greatest (the first met of equals)
        np = _numpy()  # (spilled: SWITCH changes or more)
        for ts, vs, cs in self._columns():
            if not len(ts):
                continue
            pos = [bisect_right(ts, x) for x in edges]
            for k, p in enumerate(pos):
                if p:
                    last[k] = (ts[p - 1], vs[p - 1], cs[p - 1])
            lefts = [bisect_left(ts, x) for x in edges]
            # the whole span's values in the chunk are its windows' and those at an edge within it,
            # met in time order: each window's least and greatest are candidates (not read again)
            whole = [None, None]
            for k in range(BATCHES):
                if k and edges[0] < edges[k] < edges[BATCHES]:
                    _fold(whole, vs[lefts[k]:pos[k]])
                part = vs[pos[k]:lefts[k + 1]]
                if part:
                    lo, hi = _lo_hi(part, np)
                    acc = inside[k]
                    if acc[0] is None or lo < acc[0]:
                        acc[0] = lo
                    if acc[1] is None or hi > acc[1]:
                        acc[1] = hi
                    if lo == lo and hi == hi:
                        if whole[0] is None or lo < whole[0]:
                            whole[0] = lo
                        if whole[1] is None or hi > whole[1]:
                            whole[1] = hi
                    else:  # a NaN first: min() of the part stops there, where a pass goes on
                        _fold(whole, part)
            lo, hi = whole
            if lo is not None:  # as min() and max() of the chunk's part of the span
                acc = inside[BATCHES]
                if acc[0] is None or lo < acc[0]:
                    acc[0] = lo
                if acc[1] is None or hi > acc[1]:
                    acc[1] = hi
        ints = [c + v * (x - t) for x, (t, v, c) in zip(edges, last)]

        def mean(w, width):
            (k0, k1), (lo, hi) = wins[w], inside[w]
            v0 = last[k0][1]  # the value held from the window's start: the first of those held
            lo = v0 if lo is None or not lo < v0 else lo
            hi = v0 if hi is None or not hi > v0 else hi
            return _within((ints[k1] - ints[k0]) / width, lo, hi), lo, hi
        width = span / BATCHES
        ci = _half_width([mean(w, width)[0] for w in range(BATCHES)]) if width > 0 else None  # as result()
        m, lo, hi = mean(BATCHES, span)
        return {"mean": m, "ci95": ci, "min": lo, "max": hi}


# the changes a BusyAverage keeps near its last: those within NEAR ulps of it, and one before. The
# mean's last edge, start + span * 20 / 20, is within a few ulps of the end, and every change is at
# or before the end (an instant the run has reached), so the change that edge reads is among them
NEAR = 64


class BusyAverage(TimeAverage):
    """The time average of a busy time (an engine's 0 and 1, a fifo(c) stage's share of its servers:
    never NaN), whose mean alone is read (its utilisation, mean_to). Once a change comes after the
    start, it keeps the last change at or before the start, the few near the last, and the least
    and greatest value of those between, not the changes: no memory, disk or end pass that grows with the run, and a
    fast-forward's run of iterations summed at once (split_diffs). mean_to(end) is TimeAverage's
    result(end)["mean"], to the last bit: the same additions, in the same order."""

    __slots__ = ("anchor", "ext", "tail")

    def __init__(self, start: float, v0: float = 0.0):
        super().__init__(start, v0)
        self.anchor = None    # (time, value, integral) of the last change at or before the start
        self.ext = [None, None]  # least, greatest of the changes between it and the tail (_fold)
        self.tail = None      # [time, value, integral] of the changes near the last, and one before

    def _settle(self, t: float, v: float):
        """The first change after the start: the last before it is the anchor; the arrays go."""
        self.anchor = (self.last, self.v, self.acc)
        self.acc = acc = self.acc + self.v * (t - self.last)
        self.last = t
        self.v = v
        self.tail = [[t, v, acc]]
        self.t = self.vals = self.cum = self.disk = None

    def _trim(self):
        tail = self.tail
        if len(tail) < 3:  # the last and the one before it: nothing to fold
            return
        tl = tail[-1][0]
        cut = tl - NEAR * math.ulp(tl)
        ext = self.ext
        while len(tail) > 1 and tail[1][0] < cut:  # the first is neither near nor the one before
            x = tail.pop(0)[1]  # folded (_fold's, in line: a change or two a call)
            if ext[0] is None or x < ext[0]:
                ext[0] = x
            if ext[1] is None or x > ext[1]:
                ext[1] = x

    def set(self, t: float, v: float):
        if self.tail is None:
            if t > self.start and t != self.last:
                if v != self.v:
                    self._settle(t, v)
                return
            return super().set(t, v)
        if v == self.v:
            return
        if t == self.last:  # a second change at one instant: the instant's last state is what is held
            self.tail[-1][1] = v
        else:
            self.acc = acc = self.acc + self.v * (t - self.last)
            self.last = t
            self.tail.append([t, v, acc])
            self._trim()
        self.v = v

    def split(self, t: float):
        if self.v != 1.0:
            self.set(t, 0.0)
            self.set(t, 1.0)
            return
        if t == self.last:
            return
        if self.tail is None:
            if t > self.start:
                self._settle(t, 1.0)
                return
            return super().split(t)
        self.acc = acc = self.acc + (t - self.last)  # 1.0 * (t - last)
        self.last = t
        self.tail.append([t, 1.0, acc])
        self._trim()

    def split_diffs(self, times, diffs):
        tail = self.tail
        # at once where it has settled, at 1, the ends rising and none but the last near the last
        if tail is not None and len(times) > 1 and self.v == 1.0 and min(diffs) > 0.0:
            tl = times[-1]
            if times[-2] < tl - NEAR * math.ulp(tl):
                # the tail's changes, and the new ones but the last two, are now held between; the
                # tail's last is at 1 (the signal's value), as those new ones are
                ext = self.ext
                for p in tail:  # (_fold's comparisons, in line: two or three)
                    x = p[1]
                    if ext[0] is None or x < ext[0]:
                        ext[0] = x
                    if ext[1] is None or x > ext[1]:
                        ext[1] = x
                # the integral at the last two: split's additions, in its order (reduce: plain float
                # additions in C, not sum(), which compensates from Python 3.12 on)
                a = reduce(add, diffs[:-1], self.acc)
                b = a + diffs[-1]
                self.tail = [[times[-2], 1.0, a], [tl, 1.0, b]]
                self.acc = b
                self.last = tl
                return
        for t in times:
            self.split(t)

    def rise(self, times, vals):
        raise TypeError("a busy time's average is set and split")

    follow = add_points = rise

    def result(self, end: float) -> dict:
        if self.tail is None:
            return super().result(end)
        raise TypeError("a busy time's average keeps its mean alone (mean_to)")

    def mean_to(self, end: float):
        if self.tail is None:
            return super().mean_to(end)
        start = self.start
        span = end - start
        if span <= 0:
            return None
        if span * BATCHES < math.inf:  # result()'s first and last edge
            e0, e1 = start + span * 0 / BATCHES, start + span * BATCHES / BATCHES
        elif span < math.inf:
            e0, e1 = start + span / BATCHES * 0, end
        else:  # an infinite span: result()'s first edge is NaN, and so its mean
            return math.nan
        ta, va, ca = self.anchor
        at = None
        for p in reversed(self.tail):
            if p[0] <= e1:
                at = p
                break
        if at is None:  # the last edge before the tail: the anchor, where nothing was folded
            if self.ext[0] is not None:
                raise RuntimeError(f"BusyAverage: the mean to {end!r} reads a change it folded")
            at = self.anchor
        x = ((at[2] + at[1] * (e1 - at[0])) - (ca + va * (e0 - ta))) / span
        # the values held: the anchor's, those folded, then the tail's before the last edge
        held = [None, None]
        _fold(held, [va] + [y for y in self.ext if y is not None] + [p[1] for p in self.tail if p[0] < e1])
        return _within(x, *held)


def _lo_hi(a, np):
    """min(a), max(a) of an array('d'): with numpy (np, where not None) where the array is long, the
    same two floats. Where a NaN is among them, or zeros of both signs (min() and max() stop at a
    leading NaN, and keep the first met of 0.0 and -0.0), min() and max() decide."""
    if len(a) >= 256:
        if np is not None:
            x = np.frombuffer(a, dtype=np.float64)
            lo, hi = float(x.min()), float(x.max())
            if lo == lo and hi == hi:
                if lo != 0.0 and hi != 0.0:
                    return lo, hi
                signs = np.signbit(x[x == 0.0])
                if not signs.any():
                    return (0.0 if lo == 0.0 else lo), (0.0 if hi == 0.0 else hi)
                if signs.all():
                    return (-0.0 if lo == 0.0 else lo), (-0.0 if hi == 0.0 else hi)
    return min(a), max(a)


def _numpy():
    """numpy, or None where it is not installed (serq's experiments extra)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _fold(acc, xs):
    """acc's least and greatest (the first met of equals) with xs met in order, as one pass of
    min() and max() meets them."""
    for x in xs:
        if acc[0] is None or x < acc[0]:
            acc[0] = x
        if acc[1] is None or x > acc[1]:
            acc[1] = x


# Samples a statistic holds in memory (8 bytes each, array('d')); past this many, its samples go to
# an unnamed temporary file, CHUNK at a time, and the report reads them back in passes of CHUNK.
# Far above what the tests and the recorded reports make (their largest statistic holds 200 000),
# so those keep the in-memory path; either way every figure is exact (docs/reference/report.md).
SWITCH = 1 << 20
CHUNK = 1 << 16
# a list of n floats as an array's bytes (array.frombytes): fromlist and append parse each item as
# an argument (PyArg_Parse, ~160 instructions), pack reads it as a float (the same 8 bytes)
_PACK = [Struct(f"{n}d").pack for n in range(256)]
_KS: dict = {}  # a run's count k -> 256 of it, an array('q')'s bytes (Weighted._bulk)


def _put(a, xs: list):
    """a.fromlist(xs) for an array('d'): by _PACK where xs are fewer than 256."""
    n = len(xs)
    if n < 256:
        a.frombytes(_PACK[n](*xs))
    else:
        a.fromlist(xs)
STEP = 128  # one sorted chunk's every STEP-th value brackets the order statistics (_select)


class _Spill:
    """The one unnamed temporary file the columns of a run spill into (one file, not one a column:
    a program with hundreds of stage or pool members stays far below the open-file limit). It is
    closed, and so deleted, when the last column holding it goes."""
    __slots__ = ("f", "__weakref__")

    def __init__(self):
        self.f = tempfile.TemporaryFile(prefix="serq-samples-")

    def __del__(self):
        f = getattr(self, "f", None)  # None when the file could not be made
        if f is not None:
            f.close()


_spill_ref = None  # a weak reference to the file the columns now spill into


def _spill() -> _Spill:
    global _spill_ref
    sp = _spill_ref() if _spill_ref is not None else None
    if sp is None:
        sp = _Spill()
        _spill_ref = weakref.ref(sp)
    return sp


class Column:
    """Numbers appended in order: the first SWITCH in memory, then on disk as they come, each flush
    an extent (offset, count) of the shared spill file."""
    __slots__ = ("buf", "code", "file", "extents", "on_disk")

    def __init__(self, code: str = "d"):
        self.buf = array(code)
        self.code = code
        self.file = None   # the _Spill, once spilled
        self.extents = []
        self.on_disk = 0

    def __len__(self):
        return self.on_disk + len(self.buf)

    def flush(self):
        """The buffer onto the file (taken on the first call), emptied in place."""
        if self.file is None:
            self.file = _spill()
        if not self.buf:
            return
        f = self.file.f
        f.seek(0, 2)
        self.extents.append((f.tell(), len(self.buf)))
        self.buf.tofile(f)
        self.on_disk += len(self.buf)
        del self.buf[:]

    def chunks(self, start: int = 0):
        """The numbers from index `start` on, as arrays of at most CHUNK."""
        if self.file is not None:
            f = self.file.f
            f.flush()
            size = self.buf.itemsize
            first = 0  # the index of the extent's first number
            for off, n in self.extents:
                pos = max(start - first, 0)
                while pos < n:
                    k = min(CHUNK, n - pos)
                    f.seek(off + pos * size)
                    a = array(self.code)
                    a.fromfile(f, k)
                    yield a
                    pos += k
                first += n
        i = max(0, start - self.on_disk)
        while i < len(self.buf):
            yield self.buf[i:i + CHUNK]
            i += CHUNK


class Spilled:
    """A column's numbers from `start` on, once it has spilled: its length, and iteration chunk by
    chunk (what `math.fsum`, `min`, `max`, `any` read with memory that does not grow)."""
    __slots__ = ("col", "start")

    def __init__(self, col: Column, start: int):
        self.col = col
        self.start = start

    def __len__(self):
        return len(self.col) - self.start

    def __iter__(self):
        for a in self.col.chunks(self.start):
            yield from a

    def chunks(self):
        return self.col.chunks(self.start)


class Series:
    """Samples in the order they were recorded (time never goes back), warm-up included; those
    from `warm` on were recorded after the warm-up. With rows, each sample's (time, session, turn)
    beside it, for --dump. Each column holds 8 bytes a sample in memory up to SWITCH samples,
    then spills to disk (Column)."""
    __slots__ = ("col", "vb", "rcols", "warm", "warmup", "cap")

    def __init__(self, warmup: float, rows: bool = False):
        self.col = Column("d")
        self.vb = self.col.buf           # the appends go here: the hot path
        self.rcols = (Column("d"), Column("q"), Column("q")) if rows else None
        self.warm = None
        self.warmup = warmup
        self.cap = SWITCH                # the buffer's length that flushes it

    def add(self, now: float, v: float, serial=None, turn=None):
        if self.warm is None and now >= self.warmup:
            self.warm = len(self.col)
        b = self.vb
        b.append(v)
        rc = self.rcols
        if rc is not None:
            rc[0].buf.append(now)
            rc[1].buf.append(serial)
            rc[2].buf.append(turn)
        if len(b) >= self.cap:
            self._flush()

    def _flush(self):
        self.col.flush()
        for c in self.rcols or ():
            c.flush()
        self.cap = CHUNK

    @property
    def v(self):
        """Every sample, warm-up included: an array, or a Spilled view once on disk."""
        return self.vb if self.col.file is None else Spilled(self.col, 0)

    @property
    def rows(self):
        """(time, session, turn) of every sample, warm-up included (None without rows)."""
        if self.rcols is None:
            return None
        return zip(*(Spilled(c, 0) for c in self.rcols))

    def after(self):
        if self.warm is None:
            return []
        if self.col.file is None:
            return self.vb[self.warm:]
        return Spilled(self.col, self.warm)

    def dump_rows(self):
        """(time, session, turn, value) for each sample after the warm-up, in order."""
        if self.warm is None:
            return iter(())
        return zip(*(Spilled(c, self.warm) for c in self.rcols), self.after())


class Weighted:
    """Samples kept as runs of equal ones in a row, (value, count), in the order they were recorded,
    warm-up included; its statistic is that of the samples the runs stand for (summary_runs). The
    client's ITL: a fast-forwarded run gives every request of its batch the same gap at each of its
    iterations (engine.py, _itl_run), one run a gap. The runs spill to disk past SWITCH as a
    Series's samples do."""
    __slots__ = ("vcol", "kcol", "vb", "kb", "warm", "warmup", "cap")

    def __init__(self, warmup: float):
        self.vcol, self.kcol = Column("d"), Column("q")
        self.vb, self.kb = self.vcol.buf, self.kcol.buf
        self.warm = None                 # the index of the first run recorded after the warm-up
        self.warmup = warmup
        self.cap = SWITCH

    def add(self, now: float, v: float, k: int = 1):
        if self.warm is None and now >= self.warmup:
            self.warm = len(self.vcol)   # a run of its own: the warm-up falls between two runs
            self._new(v, k)
            return
        vb = self.vb
        if vb and vb[-1] == v and (v != 0.0 or math.copysign(1.0, v) == math.copysign(1.0, vb[-1])):
            self.kb[-1] += k
            return
        self._new(v, k)

    def _new(self, v, k):
        self.vb.append(v)
        self.kb.append(k)
        if len(self.vb) >= self.cap:
            self._flush()

    def extend(self, ends, vs: list, k: int):
        """add(ends[i + 1], vs[i], k) for each i, in order (a fast-forwarded run's gaps, `ends` its
        iterations' ends, ascending)."""
        if self.warm is None:
            i = bisect_left(ends, self.warmup, 1) - 1
            if i < len(vs):
                self._bulk(vs[:i], k)
                self.warm = len(self.vcol)
                self._new(vs[i], k)
                vs = vs[i + 1:]
        self._bulk(vs, k)

    def _bulk(self, vs: list, k):
        if not vs:
            return
        v = vs[0]
        vb = self.vb
        if v != 0.0 and vs[-1] == v and vs.count(v) == len(vs):  # one value all along (a constant execute): one run
            if vb and vb[-1] == v:
                self.kb[-1] += k * len(vs)
            else:
                self._new(v, k * len(vs))
            return
        _put(vb, vs)  # a run each (equal ones in a row not merged: the same samples)
        n = len(vs)
        ks = _KS.get(k) if n <= 256 else None  # each run's count k, n times: a row of 256 made once
        if ks is not None:
            self.kb.frombytes(ks[:8 * n])
        else:
            self.kb.extend(array("q", (k,)) * n)
            if n <= 256 and len(_KS) < 1024:
                _KS[k] = (array("q", (k,)) * 256).tobytes()
        if len(vb) >= self.cap:
            self._flush()

    def _flush(self):
        self.vcol.flush()
        self.kcol.flush()
        self.cap = CHUNK

    @property
    def v(self):
        return Runs(self, 0)

    def after(self):
        return Runs(self, len(self.vcol) if self.warm is None else self.warm)


class Runs:
    """A Weighted's runs from index `start` on, read as the samples they stand for: true when there
    is one, each sample in order (--dump writes one a row), chunks() (values, counts) arrays of at
    most CHUNK runs, memory then disk."""
    __slots__ = ("w", "start")

    def __init__(self, w: Weighted, start: int):
        self.w = w
        self.start = start

    def __bool__(self):
        return len(self.w.vcol) > self.start

    def __iter__(self):
        for vs, ks in self.chunks():
            for v, k in zip(vs, ks):
                yield from repeat(v, k)

    def chunks(self):
        return zip(self.w.vcol.chunks(self.start), self.w.kcol.chunks(self.start))


# ---------------------------------------------------------------- a spilled statistic's summary
def _parts(xs) -> list:
    """Floats whose exact sum is the exact sum of xs (math.fsum of them is math.fsum of xs): the
    correctly rounded sum, then the rounded remainder, until nothing remains. A non-finite sum
    is itself (an infinity or NaN decides the whole sum as it decides this one)."""
    s = math.fsum(xs)
    if not math.isfinite(s):
        return [s]
    out = [s]
    less = [-s]  # the parts taken so far, negated: xs with them sum to what is left (xs not copied)
    r = math.fsum(chain(xs, less))
    while r != 0.0:
        out.append(r)
        less.append(-r)
        r = math.fsum(chain(xs, less))
    return out


class _Acc:
    """An exact running sum with the least and greatest value, of arrays fed one at a time; of equal
    extremes (0.0 and -0.0), the first met, as min() and max() of the whole would give. Where
    math.fsum raises on the parts (sums beyond the float range, inf with -inf), the sum goes on
    exactly (_Exact): the same mean as mean_of gives the values in memory."""
    __slots__ = ("parts", "exact", "lo", "hi")

    def __init__(self):
        self.parts = []
        self.exact = None
        self.lo = math.inf
        self.hi = -math.inf

    def feed(self, a):
        if not len(a):
            return
        if self.exact is None:
            try:
                parts = self.parts + _parts(a)
                if len(parts) > 64:
                    parts = _parts(parts)
                self.parts = parts
            except (OverflowError, ValueError):
                self._go_exact()
                self.exact.add(a)
        else:
            self.exact.add(a)
        lo, hi = min(a), max(a)
        if lo < self.lo:
            self.lo = lo
        if hi > self.hi:
            self.hi = hi

    def _go_exact(self):
        self.exact = _Exact()
        self.exact.add(self.parts)  # their exact sum is the values' so far
        self.parts = None

    def raw_mean(self, n):
        """math.fsum of the values / n (mean_of's)."""
        if self.exact is None:
            try:
                return math.fsum(self.parts) / n
            except (OverflowError, ValueError):
                self._go_exact()
        return self.exact.mean(n)

    def mean(self, n):
        return _within(self.raw_mean(n), self.lo, self.hi)


def _ranks(n, qs):
    """The ranks _pct reads for each q."""
    out = set()
    for q in qs:
        pos = q * (n - 1)
        lo = int(math.floor(pos))
        out |= {lo, min(lo + 1, n - 1)}
    return sorted(out)


def _pct_at(at, n, q):
    """_pct with the order statistics from `at` (rank -> value): the same arithmetic."""
    if n == 1:
        return at[0]
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    a, b = at[lo], at[hi]
    if pos == lo or a == b:
        return a
    return a + (b - a) * (pos - lo)


def _select(chunks, sample, n_chunks, ranks) -> dict:
    """The exact order statistics at `ranks`, in one more pass over the chunks, from `sample`: the
    sorted values at every STEP-th place of each sorted chunk. A value has, in a chunk, at most STEP
    times as many values below it as the chunk's sample has, and at least that less STEP - 1; so
    the sample brackets each rank between two values a and b, and the pass counts the values below
    a and keeps those in [a, b] (about 2 n STEP / CHUNK of them): the rank is among those kept."""
    sample.sort()
    m = len(sample)
    brackets = []
    for r in ranks:
        ka = r // STEP
        kb = -(-(r + 1) // STEP) + n_chunks - 1
        a = sample[ka] if ka < m else sample[-1]
        b = sample[kb] if kb < m else math.inf
        if ka >= m:
            a = -math.inf  # cannot happen (ka <= r / STEP <= m); kept safe all the same
        brackets.append((r, a, b, [0], []))
    for ch in chunks():
        srt = sorted(ch)
        for _, a, b, below, kept in brackets:
            i = bisect_left(srt, a)
            below[0] += i
            kept += srt[i:bisect_right(srt, b)]
    out = {}
    for r, _, _, below, kept in brackets:
        kept.sort()
        out[r] = kept[r - below[0]]
    return out


def _summary_spilled(sp: Spilled, pcts=PERCENTILES) -> dict:
    """summary() of samples on disk, with memory that does not grow with them: the same figures,
    from two passes of CHUNK samples. The mean and the batch means are exact sums correctly
    rounded (math.fsum's), the percentiles exact order statistics (_select)."""
    n = len(sp)
    size = n // BATCHES
    start = n - size * BATCHES
    whole = _Acc()
    batches = [_Acc() for _ in range(BATCHES)]
    sample = []
    n_chunks = 0
    lo, hi = math.inf, -math.inf  # a sorted list's first and last: of equal ones, the first and last met
    i = 0  # the index of the chunk's first sample
    for ch in sp.chunks():
        n_chunks += 1
        whole.feed(ch)
        srt = sorted(ch)
        if srt[0] < lo:
            lo = srt[0]
        if srt[-1] >= hi:
            hi = srt[-1]
        j = 0
        while j < len(ch):
            g = i + j  # cut the chunk where batches begin and end
            if g < start:
                j = start - i
                continue
            b = (g - start) // size
            end = min(len(ch), start + (b + 1) * size - i)
            batches[b].feed(ch[j:end])
            j = end
        sample += srt[::STEP]
        i += len(ch)
    means = [acc.mean(size) for acc in batches]
    at = _select(sp.chunks, sample, n_chunks, _ranks(n, [p / 100 for p in pcts]))
    mean = _within(whole.raw_mean(n), lo, hi)
    return _figures_of(n, mean, _std(mean, n, lo, hi, lambda: ((ch, None) for ch in sp.chunks())),
                       _half_width(means) if size >= 2 else None, pcts, lambda q: _pct_at(at, n, q), lo, hi)


# ---------------------------------------------------------------- a statistic of runs
_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two halves of 26 bits
_TINY, _HUGE = 2.0 ** -900, 2.0 ** 900


def _times(vs, ks):
    """Floats whose exact sum is that of each v times its count k (math.fsum of them is math.fsum of
    the samples), or None where they are not made so (then _Exact). Where the count changes seldom
    (a fast-forward's runs, each its batch's turns), the values of each count are summed first,
    exactly (_parts), and their few parts multiplied; else each v: _split."""
    m = len(ks)
    cuts = list(compress(range(1, m), map(ne, ks[1:], ks)))
    if len(cuts) > m // 8:
        return _split(vs, ks)
    cuts.append(m)
    # the stretches of one count gathered by count (an exact sum reads its terms in any order): a
    # sum and a split for each count, not for each stretch (a fast-forward's: ~26 runs each)
    by = {}
    a = 0
    for b in cuts:
        k = ks[a]
        got = by.get(k)
        if got is None:
            by[k] = vs[a:b]
        else:
            got += vs[a:b]
        a = b
    out = []
    for k, xs in by.items():
        if k == 1:
            out += xs
        else:
            parts = _split(_parts(xs), repeat(k))
            if parts is None:
                return None
            out += parts
    return out


def _split(vs, ks):
    """_times, each v split into two halves of 26 bits, each times its k < 2**26 exact (a v far
    from 1 in magnitude, or not finite, is left to _Exact: None)."""
    out = []
    app = out.append
    for v, k in zip(vs, ks):
        if k == 1 or v == 0.0:  # v * k is v (a zero keeps its sign)
            app(v)
            continue
        a = abs(v)
        if not (_TINY <= a <= _HUGE) or k >= 67108864:
            return None
        c = _SPLIT * v
        h = c - (c - v)
        app(h * k)
        app((v - h) * k)
    return out


class _WAcc(_Acc):
    """_Acc of runs: the exact sum of each value times its count, the least and greatest value."""
    __slots__ = ()

    def feed_runs(self, vs, ks, vl=None):
        """vl, where given, is vs as a list (its extremes read without a float made for each)."""
        if not len(vs):
            return
        if self.exact is None:
            try:
                terms = _times(vs if vl is None else vl, ks)
                if terms is not None:
                    parts = self.parts + _parts(terms)
                    if len(parts) > 64:
                        parts = _parts(parts)
                    self.parts = parts
            except (OverflowError, ValueError):
                terms = None
            if terms is None:
                self._go_exact()
                self.exact.add_times(vs, ks)
        else:
            self.exact.add_times(vs, ks)
        if vl is None:
            vl = vs
        lo, hi = min(vl), max(vl)
        if lo < self.lo:
            self.lo = lo
        if hi > self.hi:
            self.hi = hi

    def feed_one(self, v, k):
        """feed_runs of one run, (v, k)."""
        t = _split((v,), (k,)) if self.exact is None else None
        if t is None:
            if self.exact is None:
                self._go_exact()
            self.exact.add_times((v,), (k,))
        else:
            self.parts += t  # exact products: their sum is v * k
            if len(self.parts) > 64:
                try:
                    self.parts = _parts(self.parts)
                except (OverflowError, ValueError):
                    self._go_exact()
        if v < self.lo:
            self.lo = v
        if v > self.hi:
            self.hi = v

    def absorb(self, other):
        """Add other's exact sum to this one's (its least and greatest value are not read)."""
        if self.exact is None and other.exact is None:
            parts = self.parts + other.parts
            if len(parts) > 64:
                try:
                    parts = _parts(parts)
                except (OverflowError, ValueError):
                    self._go_exact()
                    self.exact.add(other.parts)
                    return
            self.parts = parts
            return
        if self.exact is None:
            self._go_exact()
        if other.exact is None:
            self.exact.add(other.parts)
        else:
            self.exact.n += other.exact.n
            self.exact.special += other.exact.special


def summary_runs(runs: Runs, pcts=PERCENTILES) -> dict:
    """summary() of the samples the runs stand for, each value its count of times in a row, without
    writing them out: the same figures to the last bit (tests/test_throughput.py compares). The
    exact sums of value times count for the 20 batch means, and the mean from theirs and those of
    the samples the batches leave out (_pieces); the order statistics read off the counts: each
    value's total count where the values are few (_count_into, _from_counts; with numpy where the
    runs are many, _summary_counted), else from the runs sorted (in memory, short runs written out;
    on disk, in passes over the runs CHUNK at a time, _select_runs)."""
    w = runs.w
    if w.vcol.file is None:
        vs, ks = w.vb[runs.start:], w.kb[runs.start:]
        if ks.count(1) == len(ks):  # each run one sample
            return summary(vs, pcts)
        v = vs[0]
        if v != 0.0 and math.isfinite(v) and vs.count(v) == len(vs):
            return _constant(v, sum(ks), pcts)  # one value all along (a constant execute's gaps)
        if len(vs) >= NP_RUNS:
            out = _summary_counted(lambda: [(vs, ks)], pcts)
            if out is not None:
                return out
        n = sum(ks)
        h = {}
        # CHUNK at a time, as on disk: a chunk's list of values at most alive at once
        if all(_count_into(h, vs[a:a + CHUNK].tolist(), ks[a:a + CHUNK]) for a in range(0, len(vs), CHUNK)) \
                and _countable(h):
            size = n // BATCHES
            accs = [_WAcc() for _ in range(BATCHES + 1)]
            g = 0
            for a in range(0, len(vs), CHUNK):
                part = vs[a:a + CHUNK]
                g = _pieces(accs, part, ks[a:a + CHUNK], g, size, n - size * BATCHES, part.tolist())
            return _from_counts(h, n, size, accs, pcts)
        if n <= 4 * len(ks) and n <= SWITCH:  # short runs of many values, written out: summary() of the samples
            return summary(list(chain.from_iterable(map(repeat, vs.tolist(), ks.tolist()))), pcts)
        return _summary_runs(vs, ks, pcts)
    if len(w.vcol) - runs.start >= NP_RUNS:
        out = _summary_counted(runs.chunks, pcts)
        if out is not None:
            return out
    n = 0
    for ks in w.kcol.chunks(runs.start):
        n += sum(ks)
    if n == 0:
        return summary([], pcts)
    size = n // BATCHES
    start = n - size * BATCHES
    # a pass for the batches' sums and each value's count; the sorted chunks below only where the
    # values are too many or not all finite and nonzero (_from_counts)
    accs = [_WAcc() for _ in range(BATCHES + 1)]
    h = {}
    g = 0
    for vs, ks in runs.chunks():
        vl = vs.tolist()  # read once, by the sums' extremes and the counts
        g = _pieces(accs, vs, ks, g, size, start, vl)
        if not _count_into(h, vl, ks):
            break
    else:
        if _countable(h):
            return _from_counts(h, n, size, accs, pcts)
    del h
    accs = [_WAcc() for _ in range(BATCHES + 1)]
    lo, hi = math.inf, -math.inf  # as sorted() of the samples gives them: the first least, the last greatest
    samples = []
    # each chunk's runs in value order (stable: equal values as recorded), kept on disk for the
    # order statistics' pass, which then sorts nothing again
    sv_col, sk_col = Column("d"), Column(w.kcol.code)
    sv_col.file = sk_col.file = _Spill()  # a file of their own, gone with them when the summary is made
    g = 0  # the index of the chunk's first sample
    for vs, ks in runs.chunks():
        vl = vs.tolist()  # a list's items are read faster than an array's (no float made at each)
        order = sorted(range(len(vl)), key=vl.__getitem__)
        sv, sk = array("d"), array(sk_col.code)
        sv.fromlist(list(map(vl.__getitem__, order)))
        sk.fromlist(list(map(ks.tolist().__getitem__, order)))
        if sv[0] < lo:
            lo = sv[0]
        if sv[-1] >= hi:
            hi = sv[-1]
        g = _pieces(accs, vs, ks, g, size, start)
        samples.append(_run_sample(sv, sk))
        sv_col.buf, sk_col.buf = sv, sk
        sv_col.flush()
        sk_col.flush()
    at = _select_runs(zip(sv_col.chunks(), sk_col.chunks()), samples, _ranks(n, [p / 100 for p in pcts]))
    return _figures(n, size, accs, at, lo, hi, pcts, runs.chunks)


# the runs from which summary_runs counts with numpy where it is installed (serq's experiments extra,
# which `make install` installs): below, the loops cost less than its import
NP_RUNS = 1 << 16
BLOCK = 1 << 18


def _summary_counted(chunks, pcts):
    """summary_runs of runs whose values are few (at most DISTINCT), all finite and nonzero, with
    numpy: each block of runs sorted by value and each value's count summed (in place of
    _count_into's loop), the batches' exact sums made from each value's count in the batch (the
    products split as _split splits them: the same exact sums, so the same floats), the figures then
    as _from_counts gives them. chunks() gives the (values, counts) arrays; None where numpy is
    absent or the runs are not so (a count past 2**26, a value outside [_TINY, _HUGE] in magnitude,
    a sum out of the float range, more than DISTINCT values): summary_runs' loops then."""
    np = _numpy()
    if np is None:
        return None
    n = 0
    for _, ks in chunks():
        if len(ks):
            n += int(np.frombuffer(ks, dtype=ks.typecode).sum(dtype=np.int64))
    if n <= 0:
        return None
    size = n // BATCHES
    start = n - size * BATCHES
    bounds = [0, start] + [start + (b + 1) * size for b in range(BATCHES)]
    accs = [_WAcc() for _ in range(BATCHES + 1)]
    counted = []  # (values, counts) of each piece of each block, sorted, merged when they grow
    held = 0
    g = 0  # the index of the block's first sample
    for v, k in _blocks(np, chunks()):
        a = np.abs(v)
        if not (np.all(a >= _TINY) and np.all(a <= _HUGE)) or int(k.min()) <= 0:
            return None
        ends = np.cumsum(k)
        total = int(ends[-1])
        ends += g
        # the pieces (accs[0] the samples the batches leave out, accs[1 + b] batch b) it falls in,
        # a run cut where a piece ends, as _pieces cuts it
        for p in range(bisect_right(bounds, g) - 1, BATCHES + 1):
            x0, x1 = max(bounds[p], g), min(bounds[p + 1], g + total)
            if x0 >= x1:
                if bounds[p] >= g + total:
                    break
                continue
            i0 = int(np.searchsorted(ends, x0, "right"))
            i1 = int(np.searchsorted(ends, x1, "left"))
            pv, pk = v[i0:i1 + 1], k[i0:i1 + 1]
            if int(ends[i0] - k[i0]) < x0 or int(ends[i1]) > x1:  # its first or last run cut
                pk = pk.copy()
                if i0 == i1:
                    pk[0] = x1 - x0
                else:
                    pk[0] = int(ends[i0]) - x0
                    pk[-1] = x1 - int(ends[i1 - 1])
            u, c = _by_value(np, pv, pk, False)
            if int(c.max()) >= 67108864:
                return None
            hi_ = np.float64(_SPLIT) * u
            hi_ = hi_ - (hi_ - u)
            cf = c.astype(np.float64)
            acc = accs[p]
            try:
                parts = acc.parts + _parts(np.concatenate((hi_ * cf, (u - hi_) * cf)).tolist())
                if len(parts) > 64:
                    parts = _parts(parts)
            except (OverflowError, ValueError):
                return None
            acc.parts = parts
            lo, hi = float(u.min()), float(u.max())
            if lo < acc.lo:
                acc.lo = lo
            if hi > acc.hi:
                acc.hi = hi
            counted.append((u, c))
            held += len(u)
            if held > 4 * DISTINCT:
                counted = [_by_value(np, *map(np.concatenate, zip(*counted)), False)]
                held = len(counted[0][0])
                if held > DISTINCT:
                    return None
        g += total
    sv, cs = _by_value(np, *map(np.concatenate, zip(*counted)))
    if len(sv) > DISTINCT:
        return None
    sv, cs = sv.tolist(), cs.tolist()
    through = list(accumulate(cs))
    at = {r: sv[bisect_right(through, r)] for r in _ranks(n, [p / 100 for p in pcts])}
    return _figures(n, size, accs, at, sv[0], sv[-1], pcts, lambda: [(sv, cs)])


def _blocks(np, chunks):
    """The chunks' (values, counts) as numpy arrays (float64, int64), gathered into blocks of up to
    BLOCK runs."""
    vs, ks, m = [], [], 0
    for v, k in chunks:
        if not len(v):
            continue
        vs.append(np.frombuffer(v, dtype=np.float64))
        ks.append(np.frombuffer(k, dtype=k.typecode).astype(np.int64))
        m += len(v)
        if m >= BLOCK:
            yield np.concatenate(vs), np.concatenate(ks)
            vs, ks, m = [], [], 0
    if vs:
        yield np.concatenate(vs), np.concatenate(ks)


def _by_value(np, v, k, ordered=True):
    """The distinct values of v (none a zero or NaN), ascending where `ordered` (else in the order of
    their bits), and the sum of the counts k of each. (The bits are sorted faster, and a stable sort
    makes use of the ascending stretches a fast-forward's gaps make.)"""
    o = np.argsort(v if ordered else v.view(np.int64), kind="stable")
    sv = v[o]
    first = np.flatnonzero(np.concatenate(([True], sv[1:] != sv[:-1])))
    return sv[first], np.add.reduceat(k[o], first)


# the distinct values a statistic of runs counts (_count_into) before it sorts the runs instead: a
# fast-forward's gaps repeat (an iteration's time a function of whole numbers of tokens), ~46,000
# values in 1,000,000 runs on vllm_single_turn.sq; the dict's memory bounded whatever the runs
DISTINCT = 1 << 17


def _count_into(h: dict, vl: list, ks) -> bool:
    """Each run's count added to its value's in h (vl the values as a list); False once h holds more
    than DISTINCT values."""
    get = h.get
    for v, k in zip(vl, ks.tolist()):
        h[v] = get(v, 0) + k
    return len(h) <= DISTINCT


def _countable(h: dict) -> bool:
    """Whether _from_counts reads these counts: no value a zero (0.0 and -0.0 are one key but print
    apart, and the order statistics take the first recorded of equal ones) or not finite (sums of
    inf and NaN go their own way, and NaN sorts nowhere)."""
    return 0.0 not in h and all(map(math.isfinite, h))


def _from_counts(h: dict, n, size, accs, pcts) -> dict:
    """The statistic of n samples whose values' counts h holds (_countable), accs their batches' sums
    (_pieces). Exact sums read their terms in any order, and order statistics the sorted values'
    counts: the figures of the runs sorted (_summary_runs), to the last bit."""
    sv = sorted(h)
    cs = list(map(h.__getitem__, sv))
    through = list(accumulate(cs))
    at = {r: sv[bisect_right(through, r)] for r in _ranks(n, [p / 100 for p in pcts])}
    return _figures(n, size, accs, at, sv[0], sv[-1], pcts, lambda: [(sv, cs)])


def _constant(v, n, pcts=PERCENTILES) -> dict:
    """summary() of n samples, each the finite v: every mean v, every batch's too (ci95 0), std 0."""
    return _figures_of(n, v, 0.0, 0.0 if n // BATCHES >= 2 else None, pcts, lambda q: v, v, v)


def _summary_runs(vs, ks, pcts=PERCENTILES) -> dict:
    """summary_runs of runs in memory: one sort, each order statistic the run its rank falls in."""
    m = len(vs)
    if m == 0:
        return summary([], pcts)
    n = sum(ks)
    size = n // BATCHES
    accs = [_WAcc() for _ in range(BATCHES + 1)]
    _pieces(accs, vs, ks, 0, size, n - size * BATCHES)
    vl = vs.tolist()
    order = sorted(range(m), key=vl.__getitem__)  # stable: of equal values, the one recorded first first
    sv = list(map(vl.__getitem__, order))
    through = list(accumulate(map(ks.tolist().__getitem__, order)))
    at = {r: sv[bisect_right(through, r)] for r in _ranks(n, [p / 100 for p in pcts])}
    return _figures(n, size, accs, at, sv[0], sv[-1], pcts, lambda: [(vs, ks)])


def _figures(n, size, accs, at, lo, hi, pcts, pieces) -> dict:
    """The statistic from the pieces' sums (accs[0] those left out of the batches, accs[1:] the 20
    batches), the order statistics `at` and the least and greatest samples."""
    whole = _WAcc()
    for acc in accs:
        whole.absorb(acc)
    mean = _within(whole.raw_mean(n), lo, hi)
    return _figures_of(n, mean, _std(mean, n, lo, hi, pieces),
                       _half_width([acc.mean(size) for acc in accs[1:]]) if size >= 2 else None, pcts,
                       lambda q: _pct_at(at, n, q), lo, hi)


def _pieces(accs, vs, ks, g, size, start, vl=None) -> int:
    """Each piece of the samples fed the part of these runs in it, a run cut where a piece ends:
    accs[0] the first `start`, which the batches leave out, accs[1 + b] batch b, of `size`; g is
    the index of these runs' first sample; vl, where given, vs as a list. Returns the index after
    them."""
    total = sum(ks)
    bounds = [0, start] + [start + (b + 1) * size for b in range(BATCHES)]
    # the piece of the first sample: where the last sample is in it too, the runs whole (no cut, no
    # cumulative counts: a batch spans several chunks of a long statistic)
    p = bisect_right(bounds, g) - 1
    if 0 <= p < BATCHES + 1 and g + total <= bounds[p + 1]:
        accs[p].feed_runs(vs, ks, vl)
        return g + total
    ends = list(accumulate(ks))  # the samples through each run
    m = len(vs)
    for p in range(BATCHES + 1):
        x0 = max(bounds[p] - g, 0)
        x1 = min(bounds[p + 1] - g, total)
        if x0 >= x1:
            continue
        i0 = bisect_right(ends, x0)
        i1 = min(bisect_left(ends, x1), m - 1)
        if i0 == i1:  # within one run
            accs[p].feed_one(vs[i0], x1 - x0)
            continue
        part = array("q", ks[i0:i1 + 1])
        part[0] = ends[i0] - x0
        part[-1] = x1 - ends[i1 - 1]
        accs[p].feed_runs(vs[i0:i1 + 1], part, None if vl is None else vl[i0:i1 + 1])
    return g + total


def _run_sample(sv, sk):
    """A chunk's runs sorted by value (sv, their counts sk), every STEP-th and the last: their
    values, and the samples of the chunk before each and through each in that order; and the
    chunk's samples."""
    picked = list(range(0, len(sv), STEP))
    if picked[-1] != len(sv) - 1:
        picked.append(len(sv) - 1)
    through = list(accumulate(sk))
    return ([sv[i] for i in picked], [through[i] - sk[i] for i in picked],
            [through[i] for i in picked], through[-1])


def _select_runs(sorted_chunks, samples, ranks) -> dict:
    """The order statistics at `ranks` (rank -> value) of the samples the runs stand for, in one more
    pass over the chunks' runs sorted by value (sorted_chunks: (values, counts) each, in the order
    `samples` has them). Sorted, a chunk's sampled runs bound the samples it has below a value y:
    at least those through the last sampled run below y, at most those before the first at or
    above it (and the same for the samples at or below y). So a, the greatest sampled value with
    surely at most r samples below it, and b, the least with surely more than r at or below it,
    bracket the r-th (a chunk's first and last runs are sampled: both exist); the pass counts the
    samples below a and keeps the runs in [a, b], in order, among which the r-th is."""
    cands = sorted(v for s in samples for v in s[0])

    def below_at_most(y):
        t = 0
        for vals, before, _, total in samples:
            i = bisect_left(vals, y)
            t += before[i] if i < len(vals) else total
        return t

    def through_at_least(y):
        t = 0
        for vals, _, through, _ in samples:
            i = bisect_right(vals, y)
            if i:
                t += through[i - 1]
        return t

    brackets = []
    for r in ranks:
        lo, hi = 0, len(cands) - 1  # the greatest candidate with below_at_most <= r (the least has 0)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if below_at_most(cands[mid]) <= r:
                lo = mid
            else:
                hi = mid - 1
        a = cands[lo]
        lo, hi = 0, len(cands) - 1  # the least with through_at_least > r (the greatest has them all)
        while lo < hi:
            mid = (lo + hi) // 2
            if through_at_least(cands[mid]) > r:
                hi = mid
            else:
                lo = mid + 1
        brackets.append((r, a, cands[lo], [0], []))
    for sv, sk in sorted_chunks:
        for _, a, b, below, kept in brackets:
            i = bisect_left(sv, a)
            below[0] += sum(sk[:i])
            j = bisect_right(sv, b)
            kept += zip(sv[i:j], sk[i:j])
    out = {}
    for r, _, _, below, kept in brackets:
        kept.sort(key=lambda x: x[0])  # stable: equal values in the order recorded
        c = below[0]
        for v, k in kept:
            c += k
            if c > r:
                out[r] = v
                break
    return out
