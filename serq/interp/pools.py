"""Pools (*Semantics: Pools*, *Waiting selection*, *Ties*): admission at the head with head-of-line
blocking, reservations, the per-session prefix cache with dead entries, eviction, growth and
preemption, leases."""
from __future__ import annotations

import math

from serq.interp.stats import TimeAverage

INF = math.inf


def round_up(u: float, b: float | None) -> float:
    if not b or u == INF:
        return u
    return math.ceil(u / b - 1e-12) * b


def round_down(u: float, b: float | None) -> float:
    if not b or u == INF:
        return u
    return math.floor(u / b + 1e-12) * b


class Entry:
    """A cached prefix: its owner (None when dead), its units, its release time and order."""
    __slots__ = ("owner", "units", "t", "seq", "alive")

    def __init__(self, owner, units, t, seq):
        self.owner = owner
        self.units = units
        self.t = t
        self.seq = seq
        self.alive = True


class Alloc:
    """One hold's (or lease's) allocation on one pool member."""
    __slots__ = ("frame", "pool", "units", "reserve", "pos", "admission", "leased", "advanced",
                 "consumed", "lease_version", "blks", "stream", "nhash", "held")

    def __init__(self, frame, pool, units, reserve, pos, admission):
        self.frame = frame
        self.pool = pool
        self.units = units
        self.reserve = reserve
        self.pos = pos
        self.admission = admission
        self.leased = False
        self.advanced = False   # a growing run or a load moved the position
        self.consumed = 0.0     # the cached prefix consumed at admission
        self.lease_version = 0
        self.blks = None        # on a content pool, with a content: its blocks, in order
        self.held = True        # in its pool's allocs (a scan of the list answered it: O(holders))


class Pool:
    """One member of a pool declaration."""
    content = False  # a ContentPool's cache is keyed by content

    def __init__(self, sim, decl, index, cap: float, block: float | None):
        self.sim = sim
        self.decl = decl
        self.name = decl.name
        self.index = index
        self.label = decl.name if index is None else f"{decl.name}[{index}]"
        self.cap = cap
        self.block = block
        self.used = 0.0
        self.reserved_extra = 0.0        # Σ max(0, r - alloc) of holders, for reserve held
        self.reserve_held = decl.reserve_held
        self.allocs: list[Alloc] = []    # holders and leases, in admission order (each one's held: in it)
        self.n_holders = None            # holders(), until allocs or a holder's session changes
        self.entries: list[Entry] = []   # the cache, live and dead entries
        self.own: dict = {}              # session id -> its live entry
        self.cached = 0.0
        self.n_gone = 0                  # entries gone from the cache still in the list (_gone)
        self.queue: list = []            # waiting hold frames
        self.growers: list = []          # stalled growths, in the order they stalled
        self.admitted = 0
        self.rejected = 0
        self.evicted = 0
        self.preempted = 0
        self.admit_seq = 0
        self.max_used = 0.0
        self.used_avg = TimeAverage(sim.warmup)
        self.engine = None               # the step stage whose iterations admit this pool's queue
        self.memory_of = None            # the step stage this pool is the memory of
        self.over = None                 # a head asking for more than the cap, as last tried
        self.ff_plain = None             # engine.py's _pool_plain (and no spill), once asked

    # -- observables
    def holders(self) -> float:
        h = self.n_holders
        if h is None:  # counted again after the holders change (a gauge reads it every instant)
            h = self.n_holders = float(len({a.frame.sess.id for a in self.allocs}))
        return h

    def queued(self) -> float:
        return float(len(self.queue))

    def cachedin(self, sess) -> float:
        e = self.own.get(sess.cid)
        return e.units if e is not None else 0.0

    def _note(self):
        if self.used > self.max_used:
            self.max_used = self.used
        self.used_avg.set(self.sim.now, self.used)

    # -- room
    def room_for(self, r: float) -> bool:
        """used + r <= cap (with reserve held: the reservations still unallocated count too)."""
        extra = self.reserved_extra if self.reserve_held else 0.0
        return self.used + extra + r <= self.cap + 1e-9

    def make_room(self, need: float, keep_owner=None):
        """Evict cache entries in the pool's order until used + cached fits (*Pools*: other entries
        are evicted in the pool's order until allocations and cache fit)."""
        over = self.used + self.cached + need - self.cap
        if over <= 1e-9:
            return
        # lru: the entries are in the pool's order already (Sim.evict_order) and one evicted whole
        # leaves the list, so the scan reads them in place; keyed: a sorted copy
        ents = self.entries if self.name not in self.sim._evict_keys else self.sim.evict_order(self)
        i = 0
        while over > 1e-9 and i < len(ents):
            e = ents[i]
            if not e.alive:
                if ents is self.entries:  # gone (_gone): it leaves the list as the scan passes it
                    del ents[i]
                    self.n_gone -= 1
                else:
                    i += 1
                continue
            if keep_owner is not None and e.owner is keep_owner:
                i += 1
                continue
            take = e.units
            if self.block and e.units > over:  # per block from the tail of the entry
                take = min(e.units, round_up(over, self.block))
            self._evict(e, take)
            over -= take
            if i < len(ents) and ents[i] is e:  # still there: evicted in part, or a sorted copy
                i += 1

    def _evict(self, e: Entry, units: float):
        e.units -= units
        self.cached -= units
        self.evicted += 1
        if self.name in self.sim.spill_specs:
            self.sim.spill(self, e, units)
        if e.units <= 1e-9:
            e.alive = False
            self.entries.remove(e)
            if e.owner is not None and self.own.get(e.owner.cid) is e:
                del self.own[e.owner.cid]

    # -- the cache
    def consume(self, sess, rho: float, units: float) -> float:
        """At admission with a cache clause: consume at most rho of the own prefix; the rest of the
        entry stays cached, dead, with the same age."""
        e = self.own.pop(sess.cid, None)
        if e is None:
            return 0.0
        take = round_down(min(rho, e.units, units), self.block)
        take = max(0.0, take)
        e.units -= take
        self.cached -= take
        e.owner = None  # what is left is dead: unusable until evicted
        if e.units <= 1e-9:
            self._gone(e)
        return take

    def put_cache(self, sess, units: float):
        units = round_down(units, self.block)
        if units <= 0:
            return
        old = self.own.pop(sess.cid, None)
        if old is not None:  # the session's previous prefix is superseded: dead
            old.owner = None
        self.sim.rel_seq += 1
        e = Entry(sess, units, self.sim.now, self.sim.rel_seq)
        self.entries.append(e)
        self.own[sess.cid] = e
        self.cached += units
        # a release never leaves the pool over its cap: evict what no longer fits (make_room's own
        # test first: nothing to evict else)
        if self.used + self.cached + 0.0 - self.cap > 1e-9:
            self.make_room(0.0)

    def drop(self, sess):
        e = self.own.pop(sess.cid, None)
        if e is not None:
            self.cached -= e.units
            self._gone(e)

    def _gone(self, e: Entry):
        """An entry leaves the cache: marked, and left in the list (every reader skips what is not
        alive) until they are half of it. A session's own entry is near the list's young end, where
        removing it at once would read the whole list."""
        e.alive = False
        e.units = 0.0
        self.n_gone += 1
        if self.n_gone > 32 and 2 * self.n_gone > len(self.entries):
            self.entries = [x for x in self.entries if x.alive]
            self.n_gone = 0

    # -- allocations
    def allocate(self, frame, units: float, reserve: float) -> Alloc:
        self.used += units
        return self._holder(frame, units, reserve)

    def _holder(self, frame, units: float, reserve: float) -> Alloc:
        """A new holder of `units` (already counted in used), with its reservation (Engine.res_in
        and _note written out: an admission's hot path, two pools each)."""
        self.admit_seq += 1
        a = Alloc(frame, self, units, reserve, 0.0, self.admit_seq)
        self.allocs.append(a)
        self.n_holders = None
        eng = self.engine
        if eng is not None:  # a resident of the engine that admits this pool (Engine.rc)
            rc = eng.rc
            sid = frame.sess.id
            rc[sid] = rc.get(sid, 0) + 1
        if self.reserve_held:
            self.reserved_extra += max(0.0, reserve - units)
        self.admitted += 1
        used = self.used
        if used > self.max_used:
            self.max_used = used
        self.used_avg.set(self.sim.now, used)
        return a

    def grow_alloc(self, a: Alloc, d: float):
        if self.reserve_held:
            self.reserved_extra -= max(0.0, a.reserve - a.units)
        a.units += d
        self.used += d
        if self.reserve_held:
            self.reserved_extra += max(0.0, a.reserve - a.units)
        self._note()

    def free(self, a: Alloc):
        if not a.held:
            return
        self.allocs.remove(a)
        a.held = False
        self.n_holders = None
        eng = self.engine
        if eng is not None and not a.leased:  # Engine.res_out
            rc = eng.rc
            sid = a.frame.sess.id
            n = rc[sid] - 1
            if n:
                rc[sid] = n
            else:
                del rc[sid]
        used = self.used - a.units
        if used < 1e-9:
            used = 0.0
        self.used = used
        if self.reserve_held:
            self.reserved_extra -= max(0.0, a.reserve - a.units)
        if used > self.max_used:  # _note (written out: a release's hot path)
            self.max_used = used
        self.used_avg.set(self.sim.now, used)


class Blk:
    """A block of a content pool: its key (stream, index) once published, and how many hold it."""
    __slots__ = ("key", "ref")

    def __init__(self):
        self.key = None
        self.ref = 1


class ContentPool(Pool):
    """A pool with `cache content` (docs/reference/content.md): blocks keyed by the content they hold,
    shared by every holder and counted once in `used`; a block no holder references stays cached, in
    vLLM's free queue order (block_pool.py: a freed request's blocks appended tail first, a hit
    taking its block out, eviction from the front)."""
    content = True
    # its own three in slots: with Pool's 29 in its dict, 32 would pass the 30 of a shared-key dict,
    # where every read takes the slower lookup (a Pool attribute more wants Pool slots of its own)
    __slots__ = ("table", "free_q", "keys")

    def __init__(self, sim, decl, index, cap, block):
        super().__init__(sim, decl, index, cap, block)
        self.table: dict = {}   # key -> the blocks that hold it, oldest first (vLLM keeps duplicates)
        self.free_q: dict = {}  # the cached blocks no holder references, in eviction order (insertion)
        self.keys: dict = {}    # stream -> its blocks' keys so far (a stream's definition never changes)

    def key(self, stream, j):
        ks = self.keys.get(stream)
        if ks is None:
            ks = self.keys[stream] = []
        while len(ks) <= j:
            i = len(ks)
            ks.append((self.sim.origin(stream, (i + 1) * self.block - 1), i))
        return ks[j]

    def lookup(self, stream, limit: float) -> list:
        """The longest run of cached full blocks of the stream, at most `limit` units."""
        out = []
        if stream is None:
            return out
        n = int(math.floor(limit / self.block + 1e-12)) if limit != INF else None
        table = self.table
        key = self.key
        j = 0
        while n is None or j < n:
            blks = table.get(key(stream, j))
            if not blks:
                break
            out.append(blks[0])
            j += 1
        return out

    def cachedin(self, sess) -> float:
        return len(self.lookup(self.sim.sess_stream.get(sess.id), INF)) * self.block

    # a hold that names no content has no share of the cache (the linker requires one of a hold
    # with `cache`, L254; an IR written by hand may still hold one)
    def consume(self, sess, rho, units):
        return 0.0

    def put_cache(self, sess, units):
        return None

    def make_room(self, need: float, keep_owner=None):
        """Evict from the front of the free queue until used + cached + need fits."""
        over = self.used + self.cached + need - self.cap
        while over > 1e-9 and self.free_q:
            blk = next(iter(self.free_q))
            del self.free_q[blk]
            self._forget(blk)
            self.cached -= self.block
            self.evicted += 1
            over -= self.block

    def _forget(self, blk):
        blks = self.table.get(blk.key)
        if blks is not None:
            blks.remove(blk)
            if not blks:
                del self.table[blk.key]
        blk.key = None

    def shared_units(self, hit) -> float:
        """What of a hit other holders already reference: it takes no room."""
        return sum(1 for b in hit if b.ref > 0) * self.block

    def allocate_content(self, frame, units, reserve, stream, hit) -> Alloc:
        """Admission: the hit's blocks referenced (taken out of the free queue), the rest new."""
        b = self.block
        for blk in hit:
            if blk.ref == 0:
                del self.free_q[blk]
                self.cached -= b
                self.used += b
            blk.ref += 1
        fresh = units - len(hit) * b
        self.make_room(fresh)
        self.used += fresh
        a = self._holder(frame, units, reserve)
        a.blks = list(hit) + [Blk() for _ in range(int(round(fresh / b)))]
        a.stream = stream
        a.nhash = len(hit)
        return a

    def grow_alloc(self, a: Alloc, d: float):
        if a.blks is not None:
            a.blks.extend(Blk() for _ in range(int(round(d / self.block))))
        super().grow_alloc(a, d)

    def publish(self, a: Alloc, upto: float):
        """The full blocks below `upto` are cached by content from now on, visible to every hold."""
        k = int(math.floor(min(upto, a.units) / self.block + 1e-12))
        if a.blks is None or k <= a.nhash:
            return
        for j in range(a.nhash, k):
            blk = a.blks[j]
            if blk.key is None:
                blk.key = self.key(a.stream, j)
                self.table.setdefault(blk.key, []).append(blk)
        a.nhash = k

    def free(self, a: Alloc, keep: float = 0.0):
        """The allocation given back, tail block first; a block no one references stays cached when
        it is published and below `keep`, and is free otherwise."""
        if not a.held:
            return
        if a.blks is None:
            return super().free(a)
        self.allocs.remove(a)
        a.held = False
        self.n_holders = None
        if self.engine is not None and not a.leased:
            self.engine.res_out(a.frame.sess.id)
        b = self.block
        nkeep = len(a.blks) if keep >= len(a.blks) * b else int(math.floor(keep / b + 1e-12))
        for j in range(len(a.blks) - 1, -1, -1):
            blk = a.blks[j]
            blk.ref -= 1
            if blk.ref > 0:
                continue
            self.used -= b
            if blk.key is not None and j < nkeep:
                self.free_q[blk] = None
                self.cached += b
            elif blk.key is not None:
                self._forget(blk)
        if self.used < 1e-9:
            self.used = 0.0
        if self.reserve_held:
            self.reserved_extra -= max(0.0, a.reserve - a.units)
        self._note()
