"""Random streams (*Workload*): one per purpose, derived from the seed with a stable hash, so that
a (session, turn) draws the same marks under every deployment run on one seed.

A stream is SplitMix64: a 64-bit state advanced by a constant and mixed, cheap to create (a
session makes several) and with no shared state between streams."""
from __future__ import annotations

import hashlib
import math
import random

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
# SplitMix64's mixing multipliers (written out below: a constant, not a global lookup, per draw)
M1, M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
SCALE = 1.0 / (1 << 53)


def derive(*parts) -> int:
    """A 64-bit seed from the parts (seed, purpose, session, turn, …), stable across runs and machines."""
    h = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


class Stream:
    __slots__ = ("s",)

    def __init__(self, seed: int):
        self.s = seed & MASK

    def random(self) -> float:
        """Uniform on [0, 1)."""
        s = (self.s + GOLDEN) & MASK
        self.s = s
        z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return ((z ^ (z >> 31)) >> 11) * SCALE

    def expovariate(self, rate: float) -> float:
        s = (self.s + GOLDEN) & MASK  # random()'s body: a draw per call is the hot path
        self.s = s
        z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return -math.log(1.0 - ((z ^ (z >> 31)) >> 11) * SCALE) / rate

    def gammavariate(self, k: float, theta: float) -> float:
        return gamma(self.random, k, theta)

    def lognormvariate(self, mu: float, sigma: float) -> float:
        """exp of a normal of mean mu and standard deviation sigma: Box-Muller's first of a pair
        (two uniforms a draw, so every draw takes as many from the stream)."""
        u, v = 1.0 - self.random(), self.random()   # u in (0, 1]
        return math.exp(mu + sigma * math.sqrt(-2.0 * math.log(u)) * math.cos(2.0 * math.pi * v))


PHASES = 64  # up to this many phases an Erlang draw sums its exponentials (as it always has)


def gamma(random, k: float, theta: float) -> float:
    """Erlang(k, mean k·theta), which is Gamma(shape k, scale theta), from the uniforms `random`
    gives. Up to PHASES phases, the sum of k exponentials; above, Marsaglia and Tsang's method
    (ACM TOMS 26(3), 2000), whose loop accepts 98% of its tries at k > 64 whatever k is."""
    if k <= PHASES:
        t = 0.0
        for _ in range(int(k)):
            t -= math.log(1.0 - random())
        return t * theta
    d = k - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        # a standard normal by Box-Muller (one of the pair)
        x = math.sqrt(-2.0 * math.log(1.0 - random())) * math.cos(2.0 * math.pi * random())
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = 1.0 - random()  # in (0, 1]
        if u < 1.0 - 0.0331 * x ** 4 or math.log(u) < 0.5 * x * x + d * (1.0 - v + math.log(v)):
            return d * v * theta


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


_BASES: dict = {}


def base(seed, purpose: str) -> int:
    key = (seed, purpose)
    h = _BASES.get(key)
    if h is None:
        h = _BASES[key] = derive(seed, purpose)
    return h


def stream(seed, purpose: str, *ints: int) -> Stream:
    """The stream of (seed, purpose, session, turn, …): a stable hash of the seed and purpose,
    then each whole-number part mixed in."""
    h = base(seed, purpose)
    for x in ints:
        h = _mix((h ^ ((x + 1) * GOLDEN)) & MASK)
    return Stream(h)


def state1(b: int, x: int) -> int:
    """The state of stream(seed, purpose, x), from the purpose's base b, without the general path."""
    z = (b ^ ((x + 1) * GOLDEN)) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream1(b: int, x: int) -> Stream:
    """stream(seed, purpose, x) from the purpose's base b."""
    return Stream(state1(b, x))


def stream2(b: int, x: int, y: int) -> Stream:
    """stream(seed, purpose, x, y) from the purpose's base b."""
    return stream1(stream1(b, x).s, y)


class LongStream(random.Random):
    """A stream drawn from for the whole run (the arrival law, the trace, the machine): Python's
    Mersenne Twister, costly to seed and cheap to draw from, seeded from the same stable hash."""

    def __init__(self, seed, purpose: str):
        super().__init__(derive(seed, purpose))

    def gammavariate(self, k: float, theta: float) -> float:
        return gamma(self.random, k, theta)

    def lognormvariate(self, mu: float, sigma: float) -> float:
        """exp of a normal of mean mu and standard deviation sigma: Box-Muller's first of a pair
        (two uniforms a draw, so every draw takes as many from the stream)."""
        u, v = 1.0 - self.random(), self.random()   # u in (0, 1]
        return math.exp(mu + sigma * math.sqrt(-2.0 * math.log(u)) * math.cos(2.0 * math.pi * v))
