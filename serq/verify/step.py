"""The reference kernel's moves as formulas, and the lemmas of serq/verify/invariant.py proved
inductive over them for every number of sessions (docs/verify.md, *The step as a formula*).

The machine is abstracted to what the lemmas read. Per session: for each pool whether it holds
there (`h`) and how many units (`a`), its position on the one pool runs grow (`pos`), whether it has
a request on the engine (`req`), in decode mode (`dec`), growing that pool (`grw`), in the batch
being planned or run (`inb`) with its prefill tokens (`tp`) or its decode token (`td`). Globally:
each pool's use and the phase (0 idle, 1 an iteration planned, 2 an iteration in flight). A move of
the kernel is one of the functions the step runs (`MOVES`: an admission, a growth, a release, a
preemption or a session's end, a request's arrival, leave or tokens, an iteration's start, reading,
re-planning and end); each is a relation between the abstraction before and after it.

Every number of sessions: a move changes one session (the actor) or applies the same change to
each (an iteration's end, a re-planning). The state z3 reasons on is the actor `A`, one bystander
`O` (any session but the actor), and `R`, the sum of all the others' fields: a per-session fact is
asked of A and O, the sums' facts of R. A machine of N sessions is abstracted to such a state for
every choice of O, so a fact proved of A and O after every move holds of every session, and the
sums' facts are closed under adding a session (checked here too: `closure`), whatever N is. The
encoding is one semantics with the kernel: tests/test_verify_step.py runs the kernel, abstracts
the machine before and after each of its moves, and checks that the move's formula holds of them
(and that the abstraction's sums are what a claim reads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import z3

from serq.ref import exec as X
from serq.ref import ir as R
from serq.verify import invariant as V
from serq.verify.sym import numeral

SLOT = ("req", "dec", "grw", "inb", "tp", "td")     # besides h{i}, a{i} per pool and pos
REST = ("req", "dec", "inb", "tp", "td", "kvd", "kvp", "res")


@dataclass(frozen=True)
class Shape:
    """What of the program the encoding depends on."""
    pools: tuple            # R.Pool
    g: Optional[int]        # the one pool runs grow, not keyed by content (None: no such pool)
    least: tuple            # per pool, the least units a hold takes there (0: unknown)
    adm: tuple              # the pools the engine admits from
    inside: Optional[int]   # the admitted pool every run stands inside a hold on (None: not so)
    budget: Optional[int]   # the tokens cap when it is a constant
    covered: tuple = ()     # (i, j): a session holds on pool i only while it holds on j (invariant.covered)


def shape(p: R.Program) -> Shape:
    grown = {st.growing for st in V._nodes(V._statements(p)) if isinstance(st, R.RunS) and st.growing is not None}
    g = min(grown) if len(grown) == 1 and not p.pools[min(grown)].content else None
    least = tuple((V._least_units(p, i) or 0) if not pool.content else 0 for i, pool in enumerate(p.pools))
    adm = tuple(i for i, pool in enumerate(p.pools) if pool.admitted)
    inside = adm[0] if len(adm) == 1 and V._runs_in_holds_on(p, adm[0]) else None
    b = p.engine.budget
    budget = b.v if isinstance(b, R.Num) and b.v == int(b.v) and b.v >= 0 else None
    return Shape(p.pools, g, least, adm, inside, budget, tuple(V.covered(p)))


# ---------------------------------------------------------------- states


def _names(sh: Shape) -> tuple:
    return tuple(_holds(sh)) + ("pos",) + SLOT


def _rest_names(sh: Shape) -> tuple:
    return tuple(_holds(sh)) + REST


@dataclass
class State:
    A: dict
    O: dict
    R: dict
    G: dict                 # used{i}, phase


def fresh(sh: Shape, tag: str) -> State:
    def ints(prefix, names):
        return {n: z3.Int(f"{tag}.{prefix}.{n}") for n in names}
    G = {f"used{i}": z3.Int(f"{tag}.used{i}") for i in range(len(sh.pools))}
    G["phase"] = z3.Int(f"{tag}.phase")
    return State(ints("A", _names(sh)), ints("O", _names(sh)), ints("R", _rest_names(sh)), G)


def zero_slot(sh: Shape) -> dict:
    return {n: z3.IntVal(0) for n in _names(sh)}


def _kv(sh: Shape, s: dict, decode: bool):
    """The position a session's run in the batch has on the grown pool, which the batch's kv_decode
    (kv_prefill) counts (exec.growing_pos: 0 when it holds nothing there)."""
    if sh.g is None:
        return z3.IntVal(0)
    on = z3.And(s["inb"] == 1, s["grw"] == 1, s[f"h{sh.g}"] == 1, s["dec"] == (1 if decode else 0))
    return z3.If(on, s["pos"], 0)


def _res(sh: Shape, s: dict):
    """Whether a session is resident: it has a request, or holds on a pool the engine admits from
    (exec.resident_ids)."""
    return z3.If(z3.Or(s["req"] == 1, *[s[f"h{i}"] == 1 for i in sh.adm]), 1, 0)


def as_rest(sh: Shape, s: dict) -> dict:
    """A session's contribution to the sums R keeps."""
    out = {n: s[n] for n in _rest_names(sh) if n in s}
    out.update(kvd=_kv(sh, s, True), kvp=_kv(sh, s, False), res=_res(sh, s))
    return out


def plus(x: dict, y: dict) -> dict:
    return {n: x[n] + y[n] for n in x}


def total(sh: Shape, S: State, name: str):
    """A quantity summed over every session."""
    if name in ("kvd", "kvp", "res"):
        return as_rest(sh, S.A)[name] + as_rest(sh, S.O)[name] + S.R[name]
    return S.A[name] + S.O[name] + S.R[name]


# ---------------------------------------------------------------- the facts


def slot_facts(sh: Shape, s: dict, G: dict) -> list:
    """What every session's abstraction satisfies between the kernel's moves."""
    f = []
    for i, pool in enumerate(sh.pools):
        h, a = s[f"h{i}"], s[f"a{i}"]
        f += [h >= 0, h <= 1, a >= 0, z3.Implies(h == 0, a == 0), a >= sh.least[i] * h]
    f += [s["req"] >= 0, s["req"] <= 1, s["dec"] >= 0, s["dec"] <= s["req"], s["grw"] >= 0,
          s["grw"] <= s["req"], s["inb"] >= 0, s["inb"] <= s["req"], s["td"] >= 0, s["td"] <= s["inb"],
          s["td"] <= s["dec"], s["td"] >= s["inb"] + s["dec"] - 1, s["tp"] >= 0, s["inb"] <= s["tp"] + s["td"],
          z3.Implies(z3.Or(s["inb"] == 0, s["dec"] == 1), s["tp"] == 0),
          z3.Implies(G["phase"] == 0, s["inb"] == 0)]
    if sh.g is None:
        f += [s["grw"] == 0, s["pos"] == 0]
    else:
        hg, ag = s[f"h{sh.g}"], s[f"a{sh.g}"]
        n = z3.If(z3.And(s["grw"] == 1, s["inb"] == 1), s["tp"] + s["td"], 0)
        f += [s["pos"] >= 0, z3.Implies(hg == 0, s["pos"] == 0), z3.Implies(hg == 1, s["pos"] + n <= ag),
              z3.Implies(s["grw"] == 1, hg == 1)]
    if sh.inside is not None:
        f.append(s["req"] <= s[f"h{sh.inside}"])
    f += _nesting(sh, s)
    return f


def _nesting(sh: Shape, s: dict) -> list:
    """A hold on pool i is taken with one on j or inside one (Shape.covered)."""
    return [s[f"h{i}"] <= s[f"h{j}"] for i, j in sh.covered]


def rest_facts(sh: Shape, r: dict, G: dict) -> list:
    """What the sums of any number of sessions' abstractions satisfy (each a sum of slot facts)."""
    f = []
    for i in range(len(sh.pools)):
        f += [r[f"h{i}"] >= 0, r[f"a{i}"] >= sh.least[i] * r[f"h{i}"]]
    f += [r["req"] >= 0, r["dec"] >= 0, r["dec"] <= r["req"], r["inb"] <= r["req"], r["td"] >= 0,
          r["td"] <= r["inb"], r["td"] <= r["dec"], r["tp"] >= 0, r["inb"] <= r["tp"] + r["td"], r["kvd"] >= 0,
          r["kvp"] >= 0, z3.Implies(r["inb"] == 0, z3.And(r["kvd"] == 0, r["kvp"] == 0)),
          r["res"] >= r["req"], r["res"] <= r["req"] + sum((r[f"h{i}"] for i in sh.adm), z3.IntVal(0)),
          z3.Implies(G["phase"] == 0, z3.And(r["inb"] == 0, r["tp"] == 0, r["td"] == 0, r["kvd"] == 0, r["kvp"] == 0))]
    f += [r["res"] >= r[f"h{i}"] for i in sh.adm]
    if sh.g is not None:
        f.append(r["kvd"] + r["kvp"] <= r[f"a{sh.g}"])
    else:
        f += [r["kvd"] == 0, r["kvp"] == 0]
    if sh.inside is not None:   # each session resident exactly when it holds there
        f += [r["req"] <= r[f"h{sh.inside}"], r["res"] == r[f"h{sh.inside}"]]
    f += _nesting(sh, r)
    return f


def global_facts(sh: Shape, S: State) -> list:
    f = [S.G["phase"] >= 0, S.G["phase"] <= 2]
    for i, pool in enumerate(sh.pools):
        u = S.G[f"used{i}"]
        f.append(u >= 0)
        if not pool.content:   # a content pool's blocks are shared: its use is no sum of the holds'
            f.append(u == total(sh, S, f"a{i}"))
        if pool.cap is not None:
            f.append(u <= pool.cap)
    if sh.budget is not None:
        f.append(total(sh, S, "tp") + total(sh, S, "td") <= sh.budget)
    return f


def invariant(sh: Shape, S: State) -> list:
    return slot_facts(sh, S.A, S.G) + slot_facts(sh, S.O, S.G) + rest_facts(sh, S.R, S.G) + global_facts(sh, S)


# ---------------------------------------------------------------- the moves


def _tokens(sh: Shape, S: State):
    return total(sh, S, "tp") + total(sh, S, "td")


def _local(sh: Shape, S: State, T: State, a: list, own=()) -> list:
    """A move of the actor alone: the bystanders unchanged, the phase too, and each pool's use but
    those of `own`, which the move's own facts `a` relate."""
    f = a + _unchanged(S.O, T.O) + _unchanged(S.R, T.R) + [S.G["phase"] == T.G["phase"]]
    return f + [T.G[f"used{i}"] == S.G[f"used{i}"] for i in range(len(sh.pools)) if i not in own]


def _unchanged(s: dict, t: dict, names=None) -> list:
    return [s[n] == t[n] for n in (names if names is not None else s)]


def _holds(sh: Shape) -> list:
    """The fields of a session's holds: h{i} and a{i} for each pool."""
    return [f"h{i}" for i in range(len(sh.pools))] + [f"a{i}" for i in range(len(sh.pools))]


def mv_admit(sh: Shape, S: State, T: State) -> list:
    """exec.try_admit: the hold takes units on each of its pools where it held nothing, each pool
    having room first (exec.room_for: the use, what `reserve held` keeps, and the need within the
    cap); on the grown pool its position is the prefix it consumed, within its units."""
    A, B = S.A, T.A
    f, took = [], []
    for i, pool in enumerate(sh.pools):
        h, a, h2, a2 = A[f"h{i}"], A[f"a{i}"], B[f"h{i}"], B[f"a{i}"]
        take = z3.And(h == 0, h2 == 1)
        took.append(take)
        u, u2 = S.G[f"used{i}"], T.G[f"used{i}"]
        if pool.content:   # the blocks it references anew and its fresh ones, room made for them
            grow = z3.And(u2 >= u, u2 <= (pool.cap if pool.cap is not None else u2))
        else:
            grow = z3.And(u2 == u + a2, (u + a2 <= pool.cap) if pool.cap is not None else z3.BoolVal(True))
        # the units rounded up to the block: at least the least any hold on the pool takes
        f.append(z3.If(take, z3.And(a2 >= sh.least[i], grow), z3.And(h2 == h, a2 == a, u2 == u)))
    f.append(z3.Or(*took))
    if sh.g is not None:
        f.append(z3.If(took[sh.g], z3.And(B["pos"] >= 0, B["pos"] <= B[f"a{sh.g}"]), B["pos"] == A["pos"]))
    else:
        f.append(B["pos"] == A["pos"])
    f += _unchanged(A, B, SLOT) + _nesting(sh, B)   # a hold takes its pools together, inside its outer ones
    return _local(sh, S, T, f, range(len(sh.pools)))


def mv_grow(sh: Shape, S: State, T: State, i: int) -> list:
    """exec.grow_into on pool i: a holder's allocation grows by what there was room for (exec.grow
    found it: exec.room_for, with `reserve held` the grower's own reservation first)."""
    A, B = S.A, T.A
    pool = sh.pools[i]
    u, u2 = S.G[f"used{i}"], T.G[f"used{i}"]
    d = B[f"a{i}"] - A[f"a{i}"]
    f = [A[f"h{i}"] == 1, B[f"h{i}"] == 1, d >= 0]
    f.append(u2 >= u if pool.content else u2 == u + d)
    if pool.cap is not None:
        f.append(u2 <= pool.cap if pool.content else u + d <= pool.cap)
    others = [n for n in _names(sh) if n not in (f"h{i}", f"a{i}")]
    f += _unchanged(A, B, others)
    return _local(sh, S, T, f, (i,))


def _leave(sh: Shape, S: State, T: State, drop: bool) -> list:
    """Holds given back on any of the pools (exec.release: the use falls by the units, on a content
    pool by the blocks no other holder references), and with `drop` the request gone."""
    A, B = S.A, T.A
    f = []
    for i, pool in enumerate(sh.pools):
        h, a, h2, a2 = A[f"h{i}"], A[f"a{i}"], B[f"h{i}"], B[f"a{i}"]
        u, u2 = S.G[f"used{i}"], T.G[f"used{i}"]
        gone = z3.And(h == 1, h2 == 0, a2 == 0, (z3.And(u2 <= u, u2 >= 0)) if pool.content else u2 == u - a)
        f.append(z3.Or(gone, z3.And(h2 == h, a2 == a, u2 == u)))
    if sh.g is not None:
        f.append(z3.If(B[f"h{sh.g}"] == 0, B["pos"] == 0, B["pos"] == A["pos"]))
    else:
        f.append(B["pos"] == A["pos"])
    f += _nesting(sh, B)   # a hold's pools are given back together, an inner hold's before its outer one's
    if drop:
        f += [B[n] == 0 for n in SLOT]
    else:   # a hold's body ends with its runs done (its session ran on: it waits for no request)
        f += [A["req"] == 0] + _unchanged(A, B, SLOT)
    return _local(sh, S, T, f, range(len(sh.pools)))


def mv_release(sh: Shape, S: State, T: State) -> list:
    return _leave(sh, S, T, False)


def mv_preempt(sh: Shape, S: State, T: State) -> list:
    """exec.preempt and exec.finish: the holds released, the request gone, together."""
    return _leave(sh, S, T, True)


def mv_drop(sh: Shape, S: State, T: State) -> list:
    """exec.drop_req: the request leaves the engine, its tokens the batch."""
    A, B = S.A, T.A
    f = [B[n] == 0 for n in SLOT] + _unchanged(A, B, [n for n in _names(sh) if n not in SLOT])
    return _local(sh, S, T, f)


def mv_run(sh: Shape, S: State, T: State) -> list:
    """exec.run_stmt: a session that waits for no request submits one (a growing run where it holds:
    R042 stops the kernel otherwise)."""
    A, B = S.A, T.A
    f = [A["req"] == 0, B["req"] == 1, B["dec"] >= 0, B["dec"] <= 1, B["grw"] >= 0, B["grw"] <= 1,
         B["inb"] == 0, B["tp"] == 0, B["td"] == 0]
    if sh.g is not None:
        f.append(z3.Implies(B["grw"] == 1, A[f"h{sh.g}"] == 1))
    else:
        f.append(B["grw"] == 0)
    if sh.inside is not None:   # every run of the program stands inside a hold on that pool
        f.append(A[f"h{sh.inside}"] == 1)
    f += _unchanged(A, B, [n for n in _names(sh) if n not in SLOT])
    return _local(sh, S, T, f)


def mv_give(sh: Shape, S: State, T: State) -> list:
    """exec.give's tally: a request not yet in the batch gets n >= 1 tokens, a decode one
    (exec.tokens_for), within the budget the plan has left, and a growing run's hold reaches the
    position it will have (it grew first: exec.grow)."""
    A, B = S.A, T.A
    n = B["tp"] + B["td"]
    f = [S.G["phase"] == 1, A["req"] == 1, A["inb"] == 0, B["inb"] == 1, n >= 1,
         z3.If(A["dec"] == 1, z3.And(B["td"] == 1, B["tp"] == 0), B["td"] == 0)]
    if sh.budget is not None:
        f.append(_tokens(sh, S) + n <= sh.budget)
    if sh.g is not None:
        f.append(z3.Implies(z3.And(A["grw"] == 1, A[f"h{sh.g}"] == 1), A["pos"] + n <= A[f"a{sh.g}"]))
    f += _unchanged(A, B, [n_ for n_ in _names(sh) if n_ not in ("inb", "tp", "td")])
    return _local(sh, S, T, f)


def _every(sh: Shape, S: State, T: State, name: str, phase) -> list:
    """A move of every session (GLOBAL[name]: each session's change and the sums'), the phase's as
    given, each pool's use unchanged."""
    slot, rest = GLOBAL[name]
    f = slot(sh, S.A, T.A) + slot(sh, S.O, T.O) + rest(sh, S.R, T.R) + [phase(S.G["phase"], T.G["phase"])]
    f += [T.G[f"used{i}"] == S.G[f"used{i}"] for i in range(len(sh.pools))]
    return f


def _keep_holds(sh: Shape, s: dict, t: dict) -> list:
    return _unchanged(s, t, _holds(sh))


def _clear(s: dict, t: dict, names) -> list:
    return [t[n] == 0 for n in names]


def slot_start(sh, s, t):
    return _keep_holds(sh, s, t) + _unchanged(s, t, ("pos",) + SLOT)


def rest_start(sh, r, r2):
    return _unchanged(r, r2, _rest_names(sh))


def mv_start(sh: Shape, S: State, T: State) -> list:
    """exec.start_iteration: a plan begins (the batch is empty: the last one ended)."""
    return _every(sh, S, T, "start",
                  lambda ph, ph2: z3.And(ph == 0, ph2 == 1))


def mv_read(sh: Shape, S: State, T: State) -> list:
    """The plan read and run (phase 2), or dropped when it scheduled no token (phase 0)."""
    return _every(sh, S, T, "start",
                  lambda ph, ph2: z3.And(ph == 1, z3.Or(ph2 == 2, z3.And(ph2 == 0, _tokens(sh, S) == 0))))


def slot_replan(sh, s, t):
    return _keep_holds(sh, s, t) + _unchanged(s, t, ("pos", "req", "dec", "grw")) + _clear(s, t, ("inb", "tp", "td"))


def rest_replan(sh, r, r2):
    return (_unchanged(r, r2, _holds(sh) + ["req", "dec", "res"]) + _clear(r, r2, ("inb", "tp", "td", "kvd", "kvp")))


def mv_replan(sh: Shape, S: State, T: State) -> list:
    """exec.exclusive: a waiting prefill that fits displaces the decodes planned: the batch empties."""
    return _every(sh, S, T, "replan",
                  lambda ph, ph2: z3.And(ph == 1, ph2 == 1))


def slot_end(sh, s, t):
    """exec.end_iteration on a session: its run's tokens advance its hold's position (exec.advance_hold),
    the batch empties, a finished run leaves the engine."""
    f = _keep_holds(sh, s, t) + _clear(s, t, ("inb", "tp", "td"))
    if sh.g is not None:
        n = z3.If(z3.And(s["grw"] == 1, s["inb"] == 1, s[f"h{sh.g}"] == 1), s["tp"] + s["td"], 0)
        f.append(t["pos"] == s["pos"] + n)
    else:
        f.append(t["pos"] == s["pos"])
    done = z3.And(t["req"] == 0, t["dec"] == 0, t["grw"] == 0)
    f.append(z3.Or(z3.And(*_unchanged(s, t, ("req", "dec", "grw"))), z3.And(s["inb"] == 1, done)))
    return f


def rest_end(sh, r, r2):
    hs = sum((r[f"h{i}"] for i in sh.adm), z3.IntVal(0))
    return (_keep_holds(sh, r, r2) + _clear(r, r2, ("inb", "tp", "td", "kvd", "kvp"))
            + [r2["req"] >= r["req"] - r["inb"], r2["req"] <= r["req"], r2["dec"] >= 0, r2["dec"] <= r["dec"],
               r2["dec"] <= r2["req"], r2["res"] <= r["res"], r2["res"] >= r2["req"], r2["res"] <= r2["req"] + hs]
            + [r2["res"] >= r[f"h{i}"] for i in sh.adm])


def mv_end(sh: Shape, S: State, T: State) -> list:
    return _every(sh, S, T, "end",
                  lambda ph, ph2: z3.And(ph == 2, ph2 == 0))


def mv_none(sh: Shape, S: State, T: State) -> list:
    """A move that changes nothing the lemmas read (a statement, a wake, a stage's job, a queue's)."""
    return _local(sh, S, T, _unchanged(S.A, T.A))


MOVES = {"admit": mv_admit, "release": mv_release, "preempt": mv_preempt, "drop": mv_drop, "run": mv_run,
         "give": mv_give, "start": mv_start, "read": mv_read, "replan": mv_replan, "end": mv_end, "none": mv_none}
GLOBAL = {"start": (slot_start, rest_start), "read": (slot_start, rest_start),
          "replan": (slot_replan, rest_replan), "end": (slot_end, rest_end)}


def moves(sh: Shape) -> dict:
    out = {k: (lambda S, T, f=f: f(sh, S, T)) for k, f in MOVES.items()}
    for i in range(len(sh.pools)):
        out[f"grow{i}"] = lambda S, T, i=i: mv_grow(sh, S, T, i)
    return out


# ---------------------------------------------------------------- the proofs


def reading(sh: Shape, p: R.Program, S: State) -> Callable:
    """A claim's quantity (invariant.leaf_name) on the abstraction, as the kernel reads it."""
    eng = p.engine.name

    def v(name: str):
        if name == "tokens":
            return _tokens(sh, S)
        if name in ("prefilled", "decoders", "residents"):
            return total(sh, S, {"prefilled": "tp", "decoders": "td", "residents": "res"}[name])
        if name in ("kv_decode", "kv_prefill"):
            return total(sh, S, "kvd" if name == "kv_decode" else "kvp")
        if name == f"queue({eng})":
            return total(sh, S, "req")
        if name == f"busy({eng})":
            return z3.If(total(sh, S, "req") > 0, 1, 0)
        fn, _, rest = name.partition("(")
        i = X.pool_index(p, rest[:-1])
        if fn == "used":
            return S.G[f"used{i}"]
        if fn == "holders":
            return total(sh, S, f"h{i}")
        if fn == "free":
            c = sh.pools[i].cap
            return z3.If(c - S.G[f"used{i}"] >= 0, c - S.G[f"used{i}"], 0)
        raise KeyError(name)
    return v


class Undecided(Exception):
    pass


def _refute(hyps: list, goal) -> Optional[z3.ModelRef]:
    """None when the hypotheses imply the goal; else a model of the hypotheses where it fails."""
    s = z3.Solver()
    s.set("timeout", 20_000)
    s.add(*hyps)
    s.add(z3.Not(goal))
    r = s.check()
    if r == z3.unsat:
        return None
    if r == z3.sat:
        return s.model()
    raise Undecided(s.reason_unknown())


def _zero_state(sh: Shape, phase: int = 0) -> State:
    G = {f"used{i}": z3.IntVal(0) for i in range(len(sh.pools))}
    G["phase"] = z3.IntVal(phase)
    return State(zero_slot(sh), zero_slot(sh), {n: z3.IntVal(0) for n in _rest_names(sh)}, G)


@dataclass
class Checked:
    """The obligations of the induction: each move keeps the invariant, the sums' facts and
    relations are closed under adding a session, and which lemmas the invariant implies."""
    failed: list          # (obligation, the fact that fails) for the invariant itself
    lemmas: dict          # lemma key -> None (implied by the inductive invariant) or why not


def check(p: R.Program) -> Checked:
    sh = shape(p)
    S, T = fresh(sh, "s"), fresh(sh, "t")
    inv = invariant(sh, S)
    failed = []

    def oblige(name: str, hyps: list, goals: list):
        try:
            if _refute(hyps, z3.And(*goals)) is None:
                return
            for g in goals:
                if _refute(hyps, g) is not None:
                    failed.append((name, str(g)))
                    return
        except Undecided as u:   # nothing is proved by what z3 could not decide
            failed.append((name, f"what z3 could not decide ({u})"))

    # the initial machine: no session, no use, idle
    Z = _zero_state(sh)
    oblige("the initial machine", [], invariant(sh, Z))
    # an arrival adds a session that holds nothing, in any phase; the sums take it in
    oblige("an arrival", global_facts(sh, S), slot_facts(sh, zero_slot(sh), S.G))
    oblige("no session", [S.G["phase"] >= 0, S.G["phase"] <= 2], rest_facts(sh, {n: z3.IntVal(0) for n in _rest_names(sh)}, S.G))
    oblige("a session added to the sums", rest_facts(sh, S.R, S.G) + slot_facts(sh, S.A, S.G),
           rest_facts(sh, plus(S.R, as_rest(sh, S.A)), S.G))
    # every move keeps the invariant
    for name, mv in moves(sh).items():
        oblige(f"the move `{name}`", inv + mv(S, T), invariant(sh, T))
    # a move of every session: what the sums do is what adding a session's move to them does
    for name, (sl, rs) in GLOBAL.items():
        zero = {n: z3.IntVal(0) for n in _rest_names(sh)}
        oblige(f"`{name}` on no session", [], rs(sh, zero, zero))
        hyps = rest_facts(sh, S.R, S.G) + slot_facts(sh, S.A, S.G) + rs(sh, S.R, T.R) + sl(sh, S.A, T.A)
        oblige(f"`{name}` on the sums", hyps, rs(sh, plus(S.R, as_rest(sh, S.A)), plus(T.R, as_rest(sh, T.A))))
    lemmas = {}
    v = reading(sh, p, S)
    for lm in V.lemmas(p):
        try:
            why = None if _refute(inv, lm.fact(v)) is None else "the encoded step's invariant does not imply it"
        except Undecided as u:
            why = f"z3 could not decide it ({u})"
        lemmas[lm.key] = why
    return Checked(failed, lemmas)


# ---------------------------------------------------------------- a kernel machine's abstraction


def abstract(p: R.Program, sh: Shape, m: X.Machine) -> tuple:
    """(per session id its fields, the globals) of a concrete machine, as the formulas read them."""
    batch = m.eng.plan.batch if m.eng.plan is not None else m.eng.batch
    toks = dict(batch)
    slots = {}
    for s in m.sess:
        f = dict.fromkeys(_names(sh), 0)
        for i in range(len(sh.pools)):
            a = X.find_alloc(m, i, s.sid)
            if a is not None:
                f[f"h{i}"], f[f"a{i}"] = 1, a.units
                if i == sh.g:
                    f["pos"] = a.pos
        rs = [r for r in m.eng.reqs if r.sid == s.sid]
        if len(rs) > 1:
            raise AssertionError(f"session {s.sid} has {len(rs)} requests on the engine")
        if rs:
            r = rs[0]
            f.update(req=1, dec=int(r.mode == "decode"), grw=int(sh.g is not None and r.growing == sh.g))
            if r.rid in toks:
                f["inb"] = 1
                f["td" if r.mode == "decode" else "tp"] = toks[r.rid]
        slots[s.sid] = f
    G = {f"used{i}": st.used for i, st in enumerate(m.pools)}
    G["phase"] = 1 if m.eng.plan is not None else (2 if m.eng.busy else 0)
    return slots, G


def _vals(d: dict) -> dict:
    return {k: numeral(v) for k, v in d.items()}


_REST: dict = {}


def _rest_of(sh: Shape, f: tuple) -> dict:
    """A concrete session's contribution to the sums (as_rest, evaluated), remembered."""
    key = (sh, f)
    r = _REST.get(key)
    if r is None:
        if len(_REST) > 50_000:
            _REST.clear()
        d = dict(f)
        sym = as_rest(sh, _vals(d))
        r = _REST[key] = {n: z3.simplify(sym[n]).as_long() if n in ("kvd", "kvp", "res") else d[n] for n in sym}
    return r


def _concrete(sh: Shape, slots: dict, G: dict, actor, other) -> State:
    zero = dict.fromkeys(_names(sh), 0)
    rest = dict.fromkeys(_rest_names(sh), 0)
    for sid, f in slots.items():
        if sid not in (actor, other):
            r = _rest_of(sh, tuple(f.items()))
            rest = {n: rest[n] + r[n] for n in rest}
    return State(_vals(slots.get(actor, zero)), _vals(slots.get(other, zero)), _vals(rest), _vals(G))


def explain(p: R.Program, sh: Shape, before: tuple, after: tuple, first: tuple = ()) -> Optional[str]:
    """The encoded move that relates two abstractions of the kernel's machine (a session that arrived
    in between holds nothing before), for every choice of the bystander; None when none does. The
    moves named in `first` are tried first. A move of one session reads the others only as
    unchanged and through the sums, so one choice of the bystander decides it; a move of every
    session is asked of each session in turn."""
    (s1, g1), (s2, g2) = before, after
    zero = dict.fromkeys(_names(sh), 0)
    ids = sorted(set(s1) | set(s2))
    s1 = {k: s1.get(k, zero) for k in ids}
    s2 = {k: s2.get(k, zero) for k in ids}
    changed = [k for k in ids if s1[k] != s2[k]]
    mv = moves(sh)
    for name in [n for n in first if n in mv] + [n for n in mv if n not in first]:
        f = mv[name]
        if name in GLOBAL:
            pairs = [(a, None) for a in ids] or [(None, None)]
        elif len(changed) > 1:
            continue
        else:
            actor = changed[0] if changed else (ids[0] if ids else None)
            pairs = [(actor, next((k for k in ids if k != actor), None))]
        if all(z3.is_true(z3.simplify(z3.And(*f(_concrete(sh, s1, g1, a, o), _concrete(sh, s2, g2, a, o)))))
               for a, o in pairs):
            return name
    return None


_CHECKED: dict = {}


def checked(p: R.Program) -> Checked:
    """`check`, once per program (a verify run asks it for each claim)."""
    key = id(p)
    got = _CHECKED.get(key)
    if got is None or got[0] is not p:
        if len(_CHECKED) > 64:
            _CHECKED.clear()
        got = _CHECKED[key] = (p, check(p))
    return got[1]
