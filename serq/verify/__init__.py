"""`serq verify`: each claim over every workload of its family within a bound (docs/verify.md),
by concolic execution of the reference kernel with z3 (serq/verify/search.py).

    res = verify(ir_program, sessions=3, values=16, timeout=60)
    res.bound, res.claims[name].verdict, .path (the deciding workload), .iteration
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Optional

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.ref import exec as X
from serq.ref import ir as R
from serq.ref.fragment import convert
from serq.ref.num import of_decimal
from serq.verify import bmc, bounded, floats, induct, invariant, robust, search as S, session, sym
from serq.verify.search import clock
from serq.verify.sym import concrete

__all__ = ["verify", "Verdict", "Result", "Disagreement", "machine_at"]


@dataclass
class Verdict:
    name: str
    form: str
    verdict: Optional[str] = None   # proved | counterexample | witnessed | no_witness | unknown
    workload: Optional[dict] = None  # the counterexample's or witness's
    iteration: Optional[int] = None
    at: Optional[int] = None
    sessions: Optional[int] = None
    seconds: float = 0.0
    reason: Optional[str] = None
    every_value: bool = False
    by: Optional[str] = None        # a proof's: "induction" (serq/verify/invariant.py), "every state"
                                    # (serq/verify/induct.py), "bound" (serq/verify/bounded.py: within
                                    # the bound only) or "every path"; a deciding workload's:
                                    # "sample" (drawn at random) or "search" (the concolic search)
    every_sessions: bool = False    # proved for every number of sessions (by induction)
    invariant: Optional[list] = None  # the lemmas that closed a proof by induction
    unended: Optional[tuple] = None  # a claim at end's: (a workload whose path does not end, why)
    unrolled: Optional[int] = None   # by "unrolled": the iterations each workload's path was cut at;
                                     # by "every path" read by merged states: the most iterations a path has
    per_session: Optional[list] = None  # by "per session": what each turn observes, and the lemma it needs
    margin: Optional[bool] = None   # a proof where the simulator's rounding could flip a comparison:
                                    # True when it holds with a margin no rounding crosses (serq/verify/floats.py)
    within_bound: Optional[list] = None  # by "bound": the bound's invariants that proved it (serq/verify/bounded.py)


@dataclass
class Result:
    prog: R.Program
    bound: dict
    claims: dict = field(default_factory=dict)   # name -> Verdict
    paths: int = 0
    trace: Optional[list] = None                  # the program's trace rows (naturals)


def family_text(p: R.Program) -> str:
    return {"batch": "arrivals at 0", "renewal": f"arrivals every {p.gap}",
            "poisson": "arrivals in serial order, consecutive gaps 0..gap"}[p.arrive]


def verify(prog: I.Program, sessions: int = 3, values: int = 16, timeout: float = 60.0) -> Result:
    """Every claim's verdict within the bound; an F-code diagnostic for a program outside the
    fragment, Q001 for a program with no claim."""
    p = convert(prog)
    if not p.claims:
        at = prog.workload.arrive.at if prog.workload is not None else None
        raise SerqError("Q001", "the program states no claim: there is nothing to verify",
                        Span(prog.files[0] if prog.files else "<ir>", 1, 1) if at is None else
                        Span(prog.files[at.file] if prog.files else "<ir>", at.line, at.col))
    trace = None
    if p.trace:
        from serq.leangen import trace_rows
        trace = trace_rows(prog)
    gap = values  # under poisson: each gap between consecutive arrivals 0..gap
    bound = {"sessions": sessions, "values": values, "arrive": p.arrive, "fuel": S.FUEL}
    if p.arrive == "poisson":
        bound["gap"] = gap
    with sym.own_context():   # the same verdicts whatever the process verified before
        res = _Search(prog, p, trace, sessions, values, timeout).run()

        def again(margin: I.Program) -> Result:   # a claim proved over the reals, again with the margin
            search = _Search(margin, convert(margin), trace, sessions, values, timeout)
            search.replay = False
            return search.run()
        floats.audit(prog, p, res, sessions, values, timeout, again)
    res.bound = bound
    bound["every_value"] = [v.name for v in res.claims.values() if v.every_value]
    bound["every_sessions"] = [v.name for v in res.claims.values() if v.every_sessions]
    return res


@dataclass
class _Claim:
    """One claim's search: what it has seen, and where its own search would have stopped."""
    j: int
    c: R.Claim
    v: Verdict
    closed: bool = False            # its search is over: decided, or stopped where it alone would
    trouble: Optional[str] = None   # reading it failed on a path (F016, say): no proof by paths
    undecided: int = 0              # branches of its readings z3 could not decide
    ran_out: Optional[str] = None   # its timeout ran out
    not_every_state: Optional[str] = None
    not_induction: Optional[str] = None  # why the kernel's invariants do not prove it
    not_bound: Optional[str] = None      # why the bound's invariants do not prove it (serq/verify/bounded.py)
    bound_proof: Optional[object] = None  # their proof (bounded.Proof), which decides once the paths had their share
    unreplayed: Optional[dict] = None   # a deciding workload whose replay ran out of the timeout
    unroll_short: Optional[int] = None  # the first depth unrolled at which its readings were not all read
    spent: Optional[float] = None   # its seconds as its search was closed
    misses: int = 0                 # a guess's prefixes (not `stable`) that broke it where its whole path did not
    reads: dict = field(default_factory=dict)   # n -> each reading's condition (its path's and its own facts)
    merged_reads: dict = field(default_factory=dict)   # n -> (a merged state's condition, unknowns, its readings')
    bounded: bool = False           # its readings do not cover every natural input: a proof within the bound only
    read_to: dict = field(default_factory=dict)   # n sessions -> the largest values every path of which it read

    @property
    def open(self) -> bool:
        return not self.closed and self.v.verdict is None


class _Search:
    """Each claim decided on its own over the paths of the kernel, which are the same whatever
    claims are read on them (docs/verify.md, *Each claim on its own*): the paths are explored once,
    and on each path every open claim's readings are explored apart (serq/verify/search.py,
    `explore_claim`). A claim's verdict, its time and where its search stops are its own."""

    def __init__(self, prog, p, trace, sessions, values, timeout):
        self.prog, self.p, self.trace = prog, p, trace
        self.sessions, self.values, self.timeout = sessions, values, timeout
        self.res = Result(p, {}, {c.name: Verdict(c.name, c.form) for c in p.claims}, trace=trace)
        self.cs = [_Claim(j, c, self.res.claims[c.name]) for j, c in enumerate(p.claims)]
        self.budget = S.Budget(timeout, [c.name for c in p.claims])
        self.trouble: list = []     # why no claim can be proved by paths: a run error, a path past the fuel
        self.lone_past_fuel = False  # a path of one session ran past the fuel
        self.finished: dict = {}    # n -> whether its paths cover every input (n is done)
        self.skipped: dict = {}     # n -> the kernel's branches z3 could not decide at its last level
        self.phase_out = False      # the running phase's own share of the time ran out
        # a deciding workload is replayed by the interpreter before it is named; not when a claim is
        # verified again with a margin (serq/verify/floats.py), whose workloads sit at a billionth
        # from the claim's bound, where the simulator's rounding is what is asked, not a disagreement
        self.replay = True
        self.finding = "search"     # how a deciding workload is being found: "sample", "unrolled" or "search"
        self.depth: Optional[int] = None   # the depth being unrolled
        self.unrolled_to = 0        # every prefix of this many iterations of every workload was read
        self.merged_to: dict = {}   # n -> the most iterations a path of n sessions has (merged states read them all)
        self.ends: tuple = ()       # the claims at end a prefix decides (search.stable); the others it guesses
        self.fam: Optional[S.Family] = None   # the family the kernel explores now (a claim out of time says it)

    def open(self) -> list:
        return [cs for cs in self.cs if cs.open]

    def kernel_left(self, limit: Optional[float] = None, also=None):
        """left() for the kernel's exploration: while an open claim (or one of `also`) has time,
        within the phase's share of the kernel's time when it has one."""
        def left():
            for cs in self.open():   # closed as soon as its time is out: its seconds stop there
                if self.budget.left(cs.v.name) <= 0:
                    self.close(cs, self.ran_out_text(self.fam))
                elif cs.bound_proof is not None and \
                        self.budget.timeout - self.budget.left(cs.v.name) >= BOUND_SHARE * self.timeout:
                    self.by_bound(cs)   # the paths had their share: the bound's invariants decide it
            t = self.budget.left_any([cs.c.name for cs in self.open() + (also() if also else [])])
            return t if limit is None else min(t, limit - self.budget.kernel())
        return left

    # ------------------------------------------------------------ naming a workload

    def decide(self, cs: _Claim, verdict: str, fam: S.Family, path: S.Path, o):
        v = cs.v
        left = lambda: self.budget.left(v.name)  # noqa: E731
        # times inside the path's region by a margin, so that the interpreter's floats read them
        # as the kernel did (serq/verify/robust.py)
        inner = robust.interior(path.facts + path.claim_facts.get(v.name, []),
                                {n: concrete(x) for n, x in path.inputs.used.items()}, lambda n: S.domain(fam, n))
        if inner is not None:
            try:
                again = S.run_path(fam, S.Inputs(inner), left, (v.name,))
            except S.Deadline:
                again = None
            o2 = again.outcomes.get(v.name) if again is not None else None
            if o2 is not None and o2.status == o.status:
                path, o = again, o2
        wl = S.concrete_workload(fam, path)
        o = replace(o, at=S.number(concrete(o.at)))  # a time that reads an arrival is a term: its value
        status = "failed" if verdict == "counterexample" else "witnessed"
        # a workload is named only when the interpreter's replay shows what the kernel found; one it
        # reads otherwise is a bug of serQ (one semantics, docs/verify.md, *Replay*)
        why = replays(self.prog, wl, v.name, status, o.at, clock() + max(0.0, left()), whole=path.done) \
            if self.replay else None
        if why == TIMED_OUT:
            if cs.unreplayed is None:
                cs.unreplayed = wl
            return
        if why is not None:
            raise Disagreement(v.name, f"{status} at {o.at}", why, wl)
        if cs.bound_proof is not None:  # a workload of the bound against its invariants' proof: serQ's bug
            raise Disagreement(v.name, f"{status} at {o.at}", "finds it so too, where the bound's invariants "
                               "proved it (serq/verify/bounded.py): " + "; ".join(cs.bound_proof.facts), wl)
        v.verdict, v.iteration, v.at, v.sessions, v.workload = verdict, o.iteration, o.at, fam.n, wl
        v.by = self.finding
        if v.by == "unrolled":
            v.unrolled = self.depth
        v.seconds = self.budget.timeout - left()

    # ------------------------------------------------------------ induction

    def induction(self):
        """A claim over iterations the kernel's invariants imply is proved for every number of
        sessions, every value and arrival time (serq/verify/invariant.py); it takes milliseconds,
        and comes first."""
        for cs in self.open():
            if cs.c.form == "end" and self.p.arrive == "closed":
                # the reference's *Claims*: a claim at end reads the machines at which every session
                # has ended, and under closed(n) none does (each session that ends is followed by
                # another): it holds vacuously, for every workload (*Paths that never end*)
                v = cs.v
                v.verdict, v.by, v.every_value, v.every_sessions = "proved", "vacuous", True, True
                continue
            if cs.c.form == "end":
                self.per_session(cs)
                if cs.v.verdict is None:
                    self.within_bound(cs)
                continue
            v = cs.v
            with self.budget.charge(v.name):
                got = invariant.prove(self.p, cs.j, lambda: self.budget.left(v.name))
            if isinstance(got, invariant.Proof):
                v.verdict = "no_witness" if v.form == "some" else "proved"
                v.by, v.every_value, v.every_sessions, v.invariant = "induction", True, True, got.invariant
                v.seconds = self.budget.timeout - self.budget.left(v.name)
            else:
                cs.not_induction = f"not by induction: {got}"
                self.within_bound(cs)

    def within_bound(self, cs: _Claim):
        """A claim proved from the invariants the bound implies (serq/verify/bounded.py): within the
        bound only, never for every value or number of sessions; milliseconds to a second. The proof
        is kept while the paths have a tenth of the timeout (`BOUND_SHARE`): they may prove it for
        every value (every path, every state), and would refute a wrong one; then it decides."""
        v = cs.v
        with self.budget.charge(v.name):
            got = bounded.prove(self.p, cs.j, self.sessions, self.values, lambda: self.budget.left(v.name))
        if isinstance(got, bounded.Proof):
            cs.bound_proof = got
        else:
            cs.not_bound = got

    def by_bound(self, cs: _Claim):
        v = cs.v
        v.verdict = "no_witness" if v.form == "some" else "proved"
        v.by, v.every_value, v.every_sessions, v.within_bound = "bound", False, False, cs.bound_proof.facts
        v.seconds = self.budget.timeout - self.budget.left(v.name)

    def per_session(self, cs: _Claim):
        """A claim at end that sums over sessions, proved one turn at a time, for every number of
        sessions (serq/verify/session.py)."""
        v = cs.v
        # at most half of the timeout: a claim it does not prove goes on to the paths (a claim at end on
        # a multi-turn program is seldom decided there: vLLM's chat is proved per session in 10-17 s)
        start, share = self.budget.left(v.name), self.budget.timeout / 2

        def left() -> float:
            now = self.budget.left(v.name)
            return min(now, share - (start - now))
        with self.budget.charge(v.name):
            got = session.prove(self.p, cs.j, left)
            if isinstance(got, str) and got.startswith(tuple(session.FAILS.values())) and \
                    any(isinstance(x, R.DrawA) for x in invariant._nodes(self.p)):
                # a failure some draw reaches (a prompt above the cap, a negative amount): within
                # the bound's values it may be none, for every number of sessions still
                share = self.budget.timeout * WITHIN_SHARE   # the boxes and Spacer after them: ~35 s on vLLM's chat
                within = session.prove(self.p, cs.j, left, values=self.values)
                if isinstance(within, session.Proof):
                    got = within
                else:
                    got = f"{got}; and with the draws 0..{self.values}: {within}"
        if isinstance(got, session.Proof):
            every = got.values is None
            v.verdict, v.by, v.every_value, v.every_sessions = "proved", "per session", every, True
            v.per_session = [got.fact, got.lemma] + [f"{where}: {text}" for where, text in got.invariants]
            v.seconds = self.budget.timeout - self.budget.left(v.name)
        else:
            cs.not_induction = f"not per session: {got}"

    # ------------------------------------------------------------ sampled workloads

    def sample(self):
        """Workloads drawn at random from the whole bound (every number of sessions, values 0..M,
        gaps 0..G), each one path of the kernel: a counterexample or a witness there is named as
        any other, replayed first. A path costs what a run costs, where the levels below flip every
        branch of it: a claim that fails on many workloads, at large values as at small ones, is
        refuted at once (docs/verify.md, *Sampled workloads*). Deterministic: the draws come from a
        fixed seed, in the kernel's order. It proves nothing."""
        self.finding = "sample"
        try:
            self._sample()
        finally:
            self.finding = "search"

    def _sample(self):
        rng = random.Random(SAMPLE_SEED)
        limit = self.budget.kernel() + self.timeout * SAMPLE_SHARE
        left = self.kernel_left(limit, self.vacuous)
        # the random workloads, then the extreme ones: every draw at the bound M (the largest
        # prompts and outputs), the sessions arriving together or a whole gap apart
        # made as they are run: a bound of a million sessions has 32 million of them
        drawn = ((n, lambda: _Sampled(rng, self.values, self.values)) for _ in range(SAMPLES)
                 for n in range(1, self.sessions + 1))
        extreme = ((n, lambda g=g: _Extreme(self.values, g)) for g in (0, self.values)[:EXTREMES]
                   for n in range(1, self.sessions + 1))
        for n, inputs in itertools.chain(drawn, extreme):
            if not (self.open() or self.vacuous()) or left() <= 0:
                return
            fam = self.fam = S.Family(self.p, self.size(n), self.values, self.values, self.trace)
            try:
                path = S.run_path(fam, S.Inputs(inputs()), left)
            except S.Deadline:
                return
            self.res.paths += 1
            if path.error is not None:
                continue
            for cs in self.vacuous():   # a path past the fuel may yet end: only one that stopped
                if path.done:
                    self.unended(cs, fam, path)
            for cs in self.open():
                o = path.outcomes.get(cs.v.name)
                if o is not None and o.status in ("failed", "witnessed") and self.budget.left(cs.v.name) > 0:
                    with self.budget.charge(cs.v.name):
                        self.decide(cs, "counterexample" if o.status == "failed" else "witnessed", fam, path, o)

    # ------------------------------------------------------------ unrolled into one formula

    def merged(self, share: float = None):
        """Bounded model checking by merged states (serq/verify/bmc.py; docs/verify.md, *Unrolled
        into one formula*): every workload of the bound at once, one iteration deeper at a time,
        the machines of one shape merged, so that the work grows with the kernel's shapes, not with
        the workloads. Each open claim is read on every state (a claim at end on every state whose
        path is over); a reading that decides it is a workload, named on its whole path, replayed
        first. When no state is left, every path of the bound of n sessions was read whole (n is
        finished: what no reading broke holds on every path, `verdicts`)."""
        share = MERGED_SHARE if share is None else share
        if not self.open() or share <= 0:
            return
        self.finding = "unrolled"
        # its share is of the CPU time, the claims' readings of the states included
        end = clock() + self.timeout * share
        reached = {}
        try:
            for n in range(1, self.sessions + 1):
                if not self.open():
                    break
                if n in self.finished:   # its paths were run and cover every input (a level)
                    reached[n] = MERGED_ALL
                    continue
                until = clock() + (end - clock()) / (self.sessions - n + 1)
                kernel = self.kernel_left()
                reached[n], multiplied = self._merge_deepen(n, lambda: min(kernel(), until - clock()))
                if multiplied:   # more sessions have more shapes
                    break
        finally:
            self.finding, self.depth = "search", None
        if len(reached) == self.sessions:
            self.unrolled_to = max(self.unrolled_to, min(reached.values()))

    def merged_decides(self) -> bool:
        """The merged states' unrolling; whether it left nothing for the search below: every claim
        decided, or every path of the bound read (a claim over iterations proved on them within the
        bound only is then still tried on every machine an iteration can start from, which may
        prove it for every value)."""
        self.merged()
        if not self.open():
            return True
        if len(self.finished) == self.sessions:
            if not self.all_covered() or any(cs.bounded for cs in self.open()):
                self.every_state()
            return True
        return False

    def _merge_deepen(self, n: int, left) -> int:
        """The states of the workloads of n sessions, depth by depth: (the deepest d every state of
        which was read, MERGED_ALL once no state is left; whether it stopped as the states of depth
        d + 1 outnumbered MERGED_STATES, whose reading would take the time the search below needs)."""
        fam = self.fam = S.Family(self.p, self.size(n), self.values, self.values, self.trace)
        states, d, clean, ends = [bmc.initial(fam)], 0, True, []
        try:
            while states and self.open():
                if d >= MERGED_MAX:
                    return d, False
                nxt, trouble = [], []
                for s in states:
                    got, undecided = bmc.successors(fam, s, left, trouble)
                    self.res.paths += len(got)
                    clean = clean and not undecided
                    nxt += got
                for mv in trouble:
                    clean = False
                    path = S.Path([], mv.inp, {}, {}, mv.error, mv.error is not None)
                    self.visit(fam)(path)
                states = bmc.frontier(nxt)
                ends += [s for s in states if s.over]
                d += 1
                if len(states) > MERGED_STATES:
                    return d - 1, True
                self.depth = d
                for s in states:
                    for cs in self.open():
                        if self.budget.left(cs.v.name) > 0:
                            clean = self._merge_read(cs, fam, s, d, left) and clean
                states = [s for s in states if not s.over]
        except S.Deadline:
            return max(0, d - 1), False
        if clean and not states:
            self.finished[n] = self._merge_covers(fam, ends, left)    # every path of the bound read whole
            for cs in self.open():
                if cs.trouble is None and not cs.undecided:
                    cs.read_to[n] = max(cs.read_to.get(n, -1), fam.values)
            self.merged_to[n] = d - 1      # the states of depth d all ended: no path has more iterations
            return MERGED_ALL, False
        return d, False

    def _merge_covers(self, fam: S.Family, ends: list, left) -> bool:
        """Whether the paths read cover every natural input and real arrival time (the states whose
        path ended cover them), and for each open claim whether its readings on each state cover
        that state's inputs; a claim whose do not is proved within the bound only."""
        def ms() -> int:
            return min(int(max(0.0, left()) * 1000), 10_000)
        names = tuple(dict.fromkeys(k for s in ends for k in s.names))
        if not S.covers(fam, [[s.cond] for s in ends], names, ms()):
            return False
        for cs in self.open():
            if not all(S.covers(fam, [[readings]], ns, ms(), given=cond)
                       for cond, ns, readings in cs.merged_reads.get(fam.n, [])):
                cs.bounded = True
        return True

    def _merge_read(self, cs: _Claim, fam: S.Family, s, d: int, left) -> bool:
        """Claim cs's every reading on the state; one that decides it is replayed on its workload's
        whole path first. Whether every reading was read."""
        c, name = cs.c, cs.v.name
        if s.over and c.form != "end":
            return True
        if not s.over and c.form == "end" and (not S.stable(c.e) or cs.misses >= GUESS_MISSES):
            return True

        def decide(inp, o) -> bool:   # the family has no depth: the path is run whole
            full = S.run_path(fam, S.Inputs({k: concrete(x) for k, x in inp.used.items()}),
                              lambda: self.budget.left(name), (name,))
            o2 = full.outcomes.get(name)
            if o.status == "not_evaluated":     # a path that stopped with sessions live
                if cs.v.unended is None and full.done and full.error is None:
                    self.unended(cs, fam, full)
                return False
            # the state's run is the whole path's beginning: the same reading at the same iteration
            # (a claim at end broken on the way: broken at the end, where the path ends)
            if o2 is not None and o2.status == o.status and (c.form == "end" or o2.iteration == d - 1):
                self.decide(cs, "counterexample" if o.status == "failed" else "witnessed", fam, full, o2)
            elif not s.over:   # broken on the way by a path that does not end: each costs a whole path
                cs.misses += 1
                return cs.misses >= GUESS_MISSES
            return cs.v.verdict is not None

        with self.budget.charge(name):
            try:
                count, undecided, err, readings = bmc.read(fam, s, cs.j, lambda: min(left(), self.budget.left(name)),
                                                           decide, cs.v.unended is None)
            except S.Deadline:
                if self.budget.left(name) > 0:
                    raise                   # the phase's share: the unrolling stops for every claim
                self.close(cs, self.ran_out_text(fam))   # the claim's own time: it alone stops
                return False
        self.res.paths += count
        cs.merged_reads.setdefault(fam.n, []).append((s.cond, s.names, readings))   # not the state: its machine
        if err is not None and cs.trouble is None:
            inp, e = err
            path = S.Path([], inp, {}, {}, e, True)
            cs.trouble = (f"reading the claim, the kernel {_stops(e)} on a workload of {fam.n} session(s): "
                          f"{S.concrete_workload(fam, path)}")
        cs.undecided += undecided
        return not undecided and err is None

    # ------------------------------------------------------------ unrolled

    def unroll(self, share: Optional[float] = None, deepest: Optional[int] = None):
        """Counterexamples and witnesses by unrolling (claims at end too: search.stable, or a guess
        checked on its whole path): every path's first
        d iterations, for d = 1, 2, 4, ..., at the whole bound (values 0..M, every number of sessions).
        A run stops as its d-th iteration starts, so the branches the kernel takes after it do not
        multiply the paths: the search runs every prefix of d iterations once, each covering every
        workload that shares it, and a claim's failing (or witnessing) iteration among them is named
        as any other, on its workload's whole path, replayed first (docs/verify.md, *Unrolled*). The
        cost grows with the prefixes, not with the workloads: a lone session's prompt of 16 tokens is
        as near as three sessions of 1. It proves nothing; the depth every workload was read to is
        said of a claim left unknown. `share` of the timeout and the `deepest` prefix bound a pass:
        the shallow one before the first look, the whole one after it."""
        share = UNROLL_SHARE if share is None else share
        deepest = UNROLL_MAX if deepest is None else deepest
        self.ends = tuple(cs.j for cs in self.cs if cs.c.form == "end" and S.stable(cs.c.e))
        if not self.unrollable() or share <= 0 or deepest < 1:
            return
        self.finding = "unrolled"
        limit = self.budget.kernel() + self.timeout * share
        reached = {}   # n -> the deepest d every prefix of which was run and read
        try:
            # each number of sessions deepened on its own share of what is left, one session first:
            # its prefixes are the fewest, and a lone long session is as near as several short ones
            for n in range(1, self.sessions + 1):
                if not self.unrollable():
                    break
                until = self.budget.kernel() + (limit - self.budget.kernel()) / (self.sessions - n + 1)
                reached[n] = self._deepen(n, self.kernel_left(until), deepest)
        finally:
            self.finding, self.depth = "search", None
        if len(reached) == self.sessions:
            self.unrolled_to = max(self.unrolled_to, min(reached.values()))

    def _deepen(self, n: int, left, deepest: int) -> int:
        """Every prefix of d iterations of the workloads of n sessions, d = 1, 2, 4, ...: the deepest
        d all of whose prefixes, and those of every d before it, were run and read (0: not even the
        first). A prefix the kernel stops with a run error is not read, and deepening goes on: the
        other workloads' prefixes may still break a claim."""
        done, d, clean = 0, 1, True
        while d <= deepest and self.unrollable():
            self.depth = d
            fam = self.fam = S.Family(self.p, self.size(n), self.values, self.values, self.trace, depth=d)
            deeper, short = [], []

            def visit(path: S.Path) -> bool:
                if path.cut:
                    deeper.append(True)
                elif path.error is not None or not path.done:
                    short.append(True)  # an error or the fuel: its iterations were not all read
                return False
            try:
                count, _, _, stopped, undecided = S.explore(fam, left, visit, self.within_prefix(fam))
            except S.Deadline as e:
                self.res.paths += e.args[0] if e.args else 0
                return done
            self.res.paths += count
            if stopped:   # every claim it reads is decided: the prefixes not run say nothing
                return done
            clean = clean and not undecided and not short   # else prefixes not run, or not read
            if clean:
                done = d if deeper else UNROLL_MAX   # every path ended before its d-th iteration: all read
            if not deeper:
                return done
            d *= 2
        return done

    def unrollable(self) -> bool:
        """Whether an open claim is one unrolling reads: all are (a claim at end not `stable` is
        read on a prefix as a guess, checked on the whole path)."""
        return any(self.unrolls(cs) for cs in self.open())

    def unrolls(self, cs: _Claim) -> bool:
        # a guess whose prefixes keep breaking it where the whole path does not (a bound below, which
        # every prefix too short meets) is read no more: each guess costs a whole path
        return cs.c.form != "end" or cs.j in self.ends or cs.misses < GUESS_MISSES

    def within_prefix(self, fam: S.Family):
        """On each prefix: every open claim's readings (a claim at end's as `stable` or as a guess);
        one that fails (or is witnessed) there is decided on the whole path of the same inputs."""
        def within(path: S.Path, under) -> bool:
            for cs in self.open():
                if path.error is not None or self.budget.left(cs.v.name) <= 0 or not self.unrolls(cs):
                    continue
                name = cs.v.name

                def see(r: S.Path, cs=cs, name=name) -> bool:
                    o = r.outcomes.get(name)
                    if o is not None and o.status in ("failed", "witnessed"):
                        whole = replace(fam, depth=None)
                        inp = S.Inputs({n: concrete(x) for n, x in r.inputs.used.items()})
                        full = S.run_path(whole, inp, lambda: self.budget.left(name), (name,))
                        o2 = full.outcomes.get(name)
                        # the prefix is the whole path's beginning: the same reading at the same iteration
                        if o2 is not None and (o2.status, o2.iteration) == (o.status, o.iteration):
                            self.decide(cs, "counterexample" if o.status == "failed" else "witnessed", whole, full, o2)
                        else:
                            cs.misses += 1
                    return cs.v.verdict is not None or not self.unrolls(cs)

                with self.budget.charge(name):
                    try:
                        _, _, undecided = S.explore_claim(fam, path, name, lambda: self.budget.left(name), see, under)
                    except S.Deadline:
                        undecided = 1
                if (undecided or name in path.errors) and cs.unroll_short is None:
                    cs.unroll_short = fam.depth   # its readings at this depth are not all known
            return not self.unrollable()
        return within

    # ------------------------------------------------------------ every state

    def every_state(self):
        """A claim over iterations that holds on the plan from every machine an iteration could
        start from is proved for every value and arrival (serq/verify/induct.py)."""
        over = [cs for cs in self.open() if cs.c.form != "end" and cs.not_every_state is None]   # once
        if not over:
            return
        limit = self.budget.kernel() + self.timeout * INDUCT_SHARE
        got, count = induct.prove(self.p, self.sessions, self.budget, limit, [cs.j for cs in over])
        self.res.paths += count
        for cs in over:
            r = got[cs.j]
            v = cs.v
            if r is True:
                v.verdict = "no_witness" if v.form == "some" else "proved"
                v.by, v.every_value = "every state", True
                v.seconds = self.budget.timeout - self.budget.left(v.name)
            else:
                cs.not_every_state = r

    # ------------------------------------------------------------ every path

    def visit(self, fam: S.Family):
        def visit(path: S.Path) -> bool:
            if path.error is not None:
                self.trouble.append(f"the kernel {_stops(path.error)} on a workload of {fam.n} session(s): "
                                    f"{S.concrete_workload(fam, path)}")
            elif not path.done:
                self.lone_past_fuel = self.lone_past_fuel or fam.n == 1
                self.trouble.append(f"a path of {fam.n} session(s) runs past {S.FUEL} steps: "
                                    f"{S.concrete_workload(fam, path)}")
            for cs in self.open():
                if cs.c.form == "end" and path.error is None:
                    self.unended(cs, fam, path)
            return False
        return visit

    def unended(self, cs: _Claim, fam: S.Family, path: S.Path):
        """A claim at end says nothing of a path that never reaches its end: the first such path
        is named to the user (docs/verify.md, *Paths that never end*)."""
        if cs.v.unended is not None:
            return
        o = path.outcomes.get(cs.v.name)
        if not path.done or (o is not None and o.status == "not_evaluated"):
            cs.v.unended = (S.concrete_workload(fam, path), UNENDED_FUEL if not path.done else
                            UNENDED_CLOSED if self.p.arrive == "closed" else UNENDED_LIVE)

    def vacuous(self) -> list:
        """The claims at end proved per session, which read no path, whose sampled paths are still
        looked at for one that does not end: the proof says nothing of it, and the user is told."""
        return [cs for cs in self.cs if cs.v.by in ("per session", "vacuous", "bound") and cs.v.unended is None]

    def within(self, fam: S.Family):
        """On each path, once the solver holds its condition: every open claim's readings."""
        def within(path: S.Path, under) -> bool:
            for cs in self.open():
                if self.budget.left(cs.v.name) <= 0:
                    self.close(cs, self.ran_out_text(fam))
                elif path.error is None:
                    self.readings(cs, fam, path, under)
            return not self.open()
        return within

    def readings(self, cs: _Claim, fam: S.Family, path: S.Path, under):
        """The claim's every reading on the path (its own branches), deciding it where one does."""
        name = cs.v.name

        def see(r: S.Path) -> bool:
            cs.reads.setdefault(fam.n, []).append(r.facts + r.claim_facts.get(name, []))
            err = r.errors.get(name)
            if err is not None and cs.trouble is None:
                cs.trouble = (f"reading the claim, the kernel {_stops(err)} on a workload of {fam.n} session(s): "
                              f"{S.concrete_workload(fam, r)}")
            o = r.outcomes.get(name)
            if o is not None and o.status in ("failed", "witnessed"):
                self.decide(cs, "counterexample" if o.status == "failed" else "witnessed", fam, r, o)
            return cs.v.verdict is not None

        with self.budget.charge(name):
            try:
                count, _, undecided = S.explore_claim(fam, path, name, lambda: self.budget.left(name), see, under)
            except S.Deadline as d:
                self.res.paths += max(0, d.args[0] - 1) if d.args else 0
                self.close(cs, self.ran_out_text(fam))
                return
        self.res.paths += count - 1      # the path itself is the kernel's, counted there
        cs.undecided += undecided

    def ran_out_text(self, fam: Optional[S.Family]) -> str:
        if fam is None:
            return f"the timeout ({self.timeout:g} s) ran out before any path"
        what = (f"unrolling the first {fam.depth} iteration(s) of the workloads of {fam.n} session(s)"
                if fam.depth is not None else
                f"unrolling every workload of {fam.n} session(s) into one formula, at iteration {self.depth}"
                if self.finding == "unrolled" and self.depth else f"exploring workloads of {fam.n} session(s)")
        return f"the timeout ({self.timeout:g} s) ran out {what} with values 0..{fam.values} after {self.res.paths} path(s)"

    def read_text(self, cs: _Claim) -> Optional[str]:
        """What an unknown claim's search did read whole, and the bound that a user can ask for to have
        it decided there: the most sessions n whose every smaller number was read at values 0..v."""
        got = cs.read_to
        if not got or 1 not in got:
            return None
        parts = [f"{n} session{'s' if n > 1 else ''} with values 0..{v}" for n, v in sorted(got.items())]
        # each bound of 1..n sessions at values 0..v read whole, the most values for each n first
        asks, v = [], None
        for n in range(1, self.sessions + 1):
            if n not in got:
                break
            v = got[n] if v is None else min(v, got[n])
            ask = " ".join(x for x in (f"--sessions {n}" if n < self.sessions else "",
                                       f"--values {v}" if v < self.values else "") if x)
            if asks and asks[-1][1] == v:
                asks[-1] = (ask, v)
            else:
                asks.append((ask, v))
        said = f"every workload of {', '.join(parts)} was run and none {'fails' if cs.c.form != 'some' else 'witnesses'} it"
        asks = [f"`{a}`" for a, _ in reversed(asks) if a][:3]
        return said + (f": {' or '.join(asks)} decides it within that bound, or a longer --timeout" if asks else "")

    def level(self, lv: int, ns, limit: Optional[float] = None) -> bool:
        """Every path of values 0..lv, of each number of sessions in `ns` not yet done: whether the
        phase's share of the time ran out (each claim out of its own time is closed, saying so)."""
        for n in ns:
            if not self.open():
                break
            if n in self.finished:
                continue
            fam = self.fam = S.Family(self.p, self.size(n), lv, lv, self.trace)
            try:
                count, conds, names, stopped, undecided = S.explore(fam, self.kernel_left(limit), self.visit(fam),
                                                                    self.within(fam))
            except S.Deadline as d:
                self.res.paths += d.args[0] if d.args else 0
                for cs in self.open():
                    if self.budget.left(cs.v.name) <= 0:
                        self.close(cs, self.ran_out_text(fam))
                return bool(self.open())     # the phase's share ran out, not the claims' time
            self.res.paths += count
            if stopped:
                break
            # the paths behind an undecided branch were not run: no proof by this level's paths,
            # while a larger level may still find a counterexample or a witness
            self.skipped[n] = undecided
            if not undecided and not self.trouble:
                for cs in self.open():   # every path of n sessions at values 0..lv read, none deciding it
                    if cs.trouble is None and not cs.undecided:
                        cs.read_to[n] = max(cs.read_to.get(n, -1), lv)
            if not undecided and not self.trouble:
                left = self.kernel_left(limit)()
                if S.covers(fam, conds, names, min(int(max(0.0, left) * 1000), 10_000)):
                    self.finished[n] = True
                    # and each claim's readings on them: a reading read the claim within the bound
                    # (`observe seen = p` at end, largest(seen) <= 3: every path the same, the
                    # claim's own fact false beyond it)
                    for cs in self.open():
                        left = self.kernel_left(limit)()
                        if not S.covers(fam, cs.reads.get(n, []), names, min(int(max(0.0, left) * 1000), 10_000)):
                            cs.bounded = True
            if lv == self.values and n not in self.finished and not undecided:
                self.finished[n] = False      # the bound itself, every path run
        return False

    def size(self, n: int) -> int:
        """The sessions of the n-th size: n, or under closed(k) the population and n - 1 that come as
        sessions end (a workload of fewer is no path of the program's)."""
        return n if self.p.arrive != "closed" else self.p.n + n - 1

    def all_covered(self) -> bool:
        return len(self.finished) == self.sessions and all(self.finished.values())

    def run(self) -> Result:
        values, sessions = self.values, self.sessions
        self.induction()
        self.sample()
        # every workload of the whole bound at once, iteration by iteration, the states of one shape
        # merged: a lone session's prompt of 16 tokens is found as soon as three of 1, and where no
        # state is left every path was read (*Unrolled into one formula*). Where every machine an
        # iteration can start from is built (*Every state*: the papers' engines, whose paths at
        # values 0..1 and machines decide them in seconds), after those
        builder = induct.scope(self.p)[0] is not None and any(cs.c.form != "end" for cs in self.open())
        if not builder and self.merged_decides():
            return self.verdicts()
        # then the first iterations of every workload as prefixes, one path each (*Unrolled*)
        self.unroll(EARLY_SHARE, EARLY_DEPTH)
        if not self.open():
            return self.verdicts()
        levels = sorted({min(values, lv) for lv in (1, 2, 4, 8)} | {values})
        every = range(1, sessions + 1)
        # a first look at the smallest values, which often decides everything (a counterexample, a
        # witness, paths that cover every input); then every state; then one session at the whole
        # bound (few paths, and a witness of one large session is found before the levels of several
        # small ones take the time); then every level of the other numbers of sessions
        out = self.level(levels[0], every, limit=self.timeout * PROBE_SHARE)
        if out or not self.all_covered():
            self.every_state()
            if builder and self.merged_decides():
                return self.verdicts()
            self.unroll()
            # a first look that ran out of its share looks again with the whole timeout, trouble or
            # not: the workloads it did not reach may decide a claim, and a machine's speed must not
            if not out:
                self.stop_troubled(3)
            lone, several = [(values, range(1, 2))], [(lv, range(2, sessions + 1)) for lv in levels[1:]]
            # a lone session past the fuel at the first look (one that preempts itself forever) is
            # slow at every value: the levels of several sessions come first then
            plan = ([(levels[0], every)] if out else []) + (several + lone if self.lone_past_fuel else lone + several)
            # the kernel's trouble (a path past the fuel, a run error) leaves no proof by paths, but a
            # workload further on may still fail or witness a claim: a lone session that preempts
            # itself forever at values 0..1 once hid a counterexample of 2 sessions (issue 46), so
            # the levels go on for as long as the timeout lasts
            for lv, ns in plan:
                if not self.open():
                    break
                out = self.level(lv, ns)
                if out or len(self.finished) == sessions:
                    break
                # a claim's own trouble (reading it stops the kernel) stops its search at the end of
                # a level of several sessions
                if ns.stop > 2:
                    self.stop_troubled(ns.stop)
        return self.verdicts()

    def stop_troubled(self, _stop: int):
        for cs in self.open():
            if cs.trouble is not None:
                self.close(cs)

    def close(self, cs: _Claim, ran_out: Optional[str] = None):
        """The claim's search is over: its seconds are what it had spent then (the kernel's paths
        may go on for the other claims, and would count against it after)."""
        cs.closed, cs.spent = True, self.budget.timeout - self.budget.left(cs.v.name)
        if ran_out is not None:
            cs.ran_out = ran_out

    def verdicts(self) -> Result:
        covered = self.all_covered()
        kernel_undecided = sum(self.skipped.values())
        for cs in self.cs:
            v = cs.v
            if v.verdict is not None:
                continue
            v.seconds = cs.spent if cs.spent is not None else self.budget.timeout - self.budget.left(v.name)
            undecided = kernel_undecided + cs.undecided
            unproved = cs.ran_out is not None or self.trouble or cs.trouble or undecided or \
                len(self.finished) < self.sessions
            if unproved and cs.bound_proof is not None and cs.unreplayed is None:
                self.by_bound(cs)   # the paths ended before its share did, and proved nothing
            elif unproved:
                v.verdict = "unknown"
                why_undecided = (f"z3 could not decide {undecided} branch(es), whose paths were not run"
                                 if undecided else None)
                if cs.ran_out is None and not self.trouble and not cs.trouble and not undecided:
                    cs.ran_out = (f"the timeout ({self.timeout:g} s) ran out after {self.res.paths} path(s)")
                unrolled = None
                k = self.unrolled_to if cs.unroll_short is None else min(self.unrolled_to, cs.unroll_short // 2)
                if k and v.form != "end":
                    unrolled = (f"unrolled to {k}: no iteration among the first {k} of any workload of the bound "
                                + ("fails it" if v.form == "every" else "witnesses it"))
                elif k and cs.j in self.ends:
                    unrolled = (f"unrolled to {k}: no workload of the bound breaks it within its first {k} "
                                "iteration(s), which would break it at the end")
                v.reason = "; and ".join(x for x in (cs.ran_out, self.trouble[0] if self.trouble else cs.trouble,
                                                      why_undecided, unrolled, cs.not_induction,
                                                      cs.not_bound, cs.not_every_state) if x)
                read = self.read_text(cs)
                if read:
                    v.reason += "; " + read
            else:
                v.verdict = "no_witness" if v.form == "some" else "proved"
                v.by, v.every_value = "every path", covered and not cs.bounded
                if len(self.merged_to) == self.sessions:   # read by the merged states alone
                    v.unrolled = max(self.merged_to.values())
            if cs.unreplayed is not None:  # the kernel decided it on a workload the replay did not reach
                v.verdict, v.by, v.every_value = "unknown", None, False
                v.reason = "; and ".join(x for x in (v.reason, "the timeout ran out replaying the workload that "
                                                     f"decides it on the kernel, {cs.unreplayed}") if x)
        return self.res


def _stops(err: str) -> str:
    """How the kernel ended a run: a refusal (F016: no natural is the interpreter's value) or a
    run error of the program."""
    return f"refuses {err}" if err.startswith("F") else f"stops with {err}{S.stop_hint(err)}"


class Disagreement(Exception):
    """The reference kernel and the interpreter read one workload differently: a bug of serQ, not a
    verdict (the CLI writes the workload and exits 3)."""

    def __init__(self, claim: str, kernel: str, interpreter: str, workload: dict):
        super().__init__(f"claim {claim}: the reference kernel finds it {kernel}, and replaying the same "
                         f"workload {interpreter.removeprefix('the ')}")
        self.claim, self.kernel, self.interpreter, self.workload = claim, kernel, interpreter, workload


TIMED_OUT = "the timeout ran out replaying it"
UNENDED_LIVE = "sessions are still live when nothing more happens (a deadlock or a stall)"
UNENDED_FUEL = f"the path runs past {S.FUEL} kernel steps (it may end later, or never)"
UNENDED_CLOSED = "a closed population never ends: each session that ends is followed by another"
SAMPLES = 32        # workloads of each number of sessions drawn at random
EXTREMES = 2        # and extreme ones: every draw M, the sessions together, then a whole gap apart
SAMPLE_SEED = 28    # their seed: the same workloads for the same program
SAMPLE_SHARE = 0.05  # of the timeout, the most they may take
PROBE_SHARE = 0.1   # of the timeout, the most the first look at values 0..1 may take
GUESS_MISSES = 8    # a claim at end not `stable`: the prefixes that break it in vain before it is read no more
MERGED_SHARE = 0.15  # of the timeout, the most the merged states' unrolling may take
MERGED_STATES = 400  # the most states of one depth it reads (vLLM's request of 2 sessions of values 0..16
                     # under poisson: 577 at depth 4, 8.7 s; one session: 7)
MERGED_MAX = 1024   # its deepest iteration
MERGED_ALL = 1 << 20   # the depth said of a family whose every path ended
UNROLL_SHARE = 0.2  # of the timeout, the most unrolling may take
UNROLL_MAX = 1024   # the deepest prefix unrolled (iterations)
EARLY_SHARE = 0.03  # of the timeout, the most the shallow unrolling before the first look may take
EARLY_DEPTH = 2     # its deepest prefix
WITHIN_SHARE = 0.8  # of the timeout, what a claim per session may take when it is read again within the values
BOUND_SHARE = 0.1   # of the timeout, what a claim the bound's invariants prove leaves to the paths first
INDUCT_SHARE = 0.7  # of the timeout, the most the proof over every state may take (at 0.5, bari_tiling.sq's
                    # `tiled` ran out of its 30 CPU s on a slow day: a machine's speed changed its verdict)


class _Sampled(dict):
    """A sampled workload's inputs, drawn as the kernel asks for them: a draw 0, 1 or 2, M, or any
    value 0..M; an arrival 0 after the one before (together), a whole gap, or one in quarters, 0..G.
    One workload in four draws every value 0 or 1: a draw a program reads as a flag (`while (more)`
    of `~bernoulli(p)`) is then one, where a 2 stops the kernel (R006) and the workload says nothing;
    one in four has every session arrive with the first (a burst: the load a scheduler meets worst)."""

    def __init__(self, rng: random.Random, values: int, gap: int):
        super().__init__()
        self.rng, self.values, self.gap = rng, values, gap
        self.flags = rng.random() < 0.25
        self.burst = rng.random() < 0.25   # and one in four has every session arrive together

    def get(self, name, default=None):
        if name in self:
            return self[name]
        r = self.rng
        if S.real(name):
            k = int(name[1:])
            before = self.get(f"a{k - 1}") if k else 0
            pick = r.random()
            gap = 0 if pick < 0.3 or (self.burst and k) else r.randint(0, self.gap) if pick < 0.6 else \
                Fraction(r.randint(0, 4 * self.gap), 4)
            v = before + gap
        elif self.flags:
            v = r.randint(0, min(1, self.values))
        else:
            pick = r.random()
            v = r.randint(0, min(2, self.values)) if pick < 0.3 else self.values if pick < 0.45 else \
                r.randint(0, self.values)
        self[name] = v
        return v


class _Extreme(dict):
    """An extreme workload's inputs: every draw M, each arrival `gap` after the one before."""

    def __init__(self, values: int, gap: int):
        super().__init__()
        self.values, self.gap = values, gap

    def get(self, name, default=None):
        return self.gap * int(name[1:]) if S.real(name) else self.values


class _Stop(Exception):
    """A replay stops early: its claim is decided for good, or the timeout ran out."""


def replays(prog: I.Program, wl: dict, claim: str, status: str, at, deadline: float | None = None,
            whole: bool = True) -> Optional[str]:
    """None when the interpreter, replaying the workload, reports the claim as the kernel did; else
    what it reports instead. Where the kernel's path ran past its fuel (not `whole`), the replay
    stops once the claim failed or was witnessed and no later session can put it out of scope (it
    has no `given`): the kernel saw no further either, and the rest of the workload (a prompt of
    1e9 tokens, say) may take the interpreter hours. Where the kernel's path ended, the replay runs
    to its end too (a run error after the claim is decided is a disagreement). Either stops when
    the CPU deadline passes: the workload is then not named for it."""
    from serq import api
    decl = next((c for c in prog.claims if c.name == claim), None)
    final = not whole and decl is not None and decl.given is None
    seen: dict = {}

    def progress(sim):
        st = sim.claim_state.get(claim)
        if final and st is not None and st["status"] in ("failed", "witnessed"):  # checked no further
            seen.update(st)
            raise _Stop()
        if deadline is not None and clock() > deadline:
            raise _Stop("timeout")

    try:
        c = api.run(prog, None, progress, wl)["claims"][claim]
    except _Stop as stop:
        if stop.args:
            return TIMED_OUT
        c = seen
    except SerqError as e:
        return f"the interpreter stops with {e.code}: {e.message}"
    if c["status"] == status and same_time(c["at"], at):
        return None
    return f"the interpreter reports {c['status']} at {c['at']}"


def same_time(a, b) -> bool:
    """Two readings of one instant: the kernel's, exact, and the interpreter's, in floating point,
    which rounds a sum of decimal costs (docs/verify.md, *Replay*)."""
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def workload_of(p: R.Program, wl: dict, trace=None) -> R.Workload:
    """A workload file's sessions as the kernel's workload: an arrival written as a decimal is the
    rational it writes (the times verify names are short decimals)."""
    out = []
    for k, s in enumerate(wl["sessions"]):
        rows = tuple(trace[k % len(trace)]) if trace else ()
        out.append(R.SessionIn(of_decimal(s["arrival"]), tuple(s["draws"]), rows))
    return R.Workload(tuple(out))


def machine_at(p: R.Program, wl: R.Workload, iteration: int) -> Optional[X.Machine]:
    """The kernel's machine just as iteration `iteration` (from 0) started: its batch in flight."""
    m = X.initial(p, wl)
    for _ in range(S.FUEL):
        m, over = X.step(p, m)
        if len(m.path) > iteration:
            return m
        if over:
            return None
    return None
