"""`serq verify`: each claim over every workload of its family within a bound (docs/verify.md),
by concolic execution of the reference kernel with z3 (serq/verify/search.py).

    res = verify(ir_program, sessions=3, values=16, timeout=60)
    res.bound, res.claims[name].verdict, .path (the deciding workload), .iteration
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.ref import exec as X
from serq.ref import ir as R
from serq.ref.fragment import convert
from serq.verify import induct, search as S
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
    every_natural: bool = False
    by: Optional[str] = None        # a proof's: "every state" (serq/verify/induct.py) or "every path"
    unended: Optional[tuple] = None  # a claim at end's: (a workload whose path does not end, why)


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
    res = Result(p, bound, {c.name: Verdict(c.name, c.form) for c in p.claims}, trace=trace)
    t0 = clock()
    deadline = t0 + timeout
    trouble: list = []      # why an undecided claim cannot be proved: a run error, a path past the fuel
    own_trouble: dict = {}  # claim -> why it alone cannot be: reading it failed on a path (F016, say)

    unreplayed: dict = {}   # claim -> a deciding workload whose replay ran out of the timeout

    def decide(v: Verdict, verdict: str, fam: S.Family, path: S.Path, o):
        wl = S.concrete_workload(fam, path)
        o = replace(o, at=concrete(o.at))  # a time that reads an arrival is a term: its value
        status = "failed" if verdict == "counterexample" else "witnessed"
        # a workload is named only when the interpreter's replay shows what the kernel found; one it
        # reads otherwise is a bug of serQ (one semantics, docs/verify.md, *Replay*)
        why = replays(prog, wl, v.name, status, o.at, deadline, whole=path.done)
        if why == TIMED_OUT:
            unreplayed.setdefault(v.name, wl)
            return
        if why is not None:
            raise Disagreement(v.name, f"{status} at {o.at}", why, wl)
        v.verdict, v.iteration, v.at, v.sessions, v.workload = verdict, o.iteration, o.at, fam.n, wl
        v.seconds = clock() - t0

    # every state: a claim over iterations that holds on the plan from every machine an iteration
    # could start from is proved for every value and arrival (serq/verify/induct.py)
    not_every_state: dict = {}

    def every_state():
        over = [j for j, c in enumerate(p.claims) if c.form != "end" and res.claims[c.name].verdict is None]
        if not over:
            return
        got, count = induct.prove(p, sessions, min(deadline, clock() + timeout * INDUCT_SHARE), over)
        res.paths += count
        for j, r in got.items():
            v = res.claims[p.claims[j].name]
            if r is True:
                v.verdict = "no_witness" if v.form == "some" else "proved"
                v.by, v.every_natural, v.seconds = "every state", True, clock() - t0
            else:
                not_every_state[v.name] = r

    # every path, the values' bound doubling from 1 (a counterexample or a witness is usually
    # small); for each number of sessions, the bound itself proves, or a level whose paths cover
    # every natural input
    finished: dict = {}     # n -> whether its paths cover every natural input (n is done)
    skipped: dict = {}      # n -> branches z3 could not decide at its last level (no proof by them)

    def level(lv: int, until: float, ns) -> bool:
        """Every path of values 0..lv, of each number of sessions in `ns` not yet done: whether the
        level ran out of time."""
        for n in ns:
            if all(v.verdict is not None for v in res.claims.values()):
                break
            if n in finished:
                continue
            fam = S.Family(p, n, lv, lv, trace)

            def visit(path: S.Path) -> bool:
                if path.error is not None:
                    trouble.append(f"the kernel {_stops(path.error)} on a workload of {fam.n} session(s): "
                                   f"{S.concrete_workload(fam, path)}")
                elif not path.done:
                    trouble.append(f"a path of {fam.n} session(s) runs past {S.FUEL} steps: "
                                   f"{S.concrete_workload(fam, path)}")
                for name, err in path.errors.items():
                    own_trouble.setdefault(name, f"reading the claim, the kernel {_stops(err)} on a workload of "
                                                 f"{fam.n} session(s): {S.concrete_workload(fam, path)}")
                for c in p.claims:
                    v = res.claims[c.name]
                    o = path.outcomes.get(c.name)
                    if c.form == "end" and v.unended is None and path.error is None and (
                            not path.done or (o is not None and o.status == "not_evaluated")):
                        # the claim says nothing of a path that never reaches its end: the user is told
                        v.unended = (S.concrete_workload(fam, path), UNENDED_FUEL if not path.done else UNENDED_LIVE)
                    if v.verdict is not None or o is None:
                        continue
                    if o.status == "failed":
                        decide(v, "counterexample", fam, path, o)
                    elif o.status == "witnessed":
                        decide(v, "witnessed", fam, path, o)
                return all(v.verdict is not None for v in res.claims.values())

            try:
                count, conds, names, stopped, undecided = S.explore(fam, until, visit)
            except S.Deadline as d:
                res.paths += d.args[0]
                ran_out[0] = (f"the timeout ({timeout:g} s) ran out exploring workloads of {n} session(s) "
                              f"with values 0..{lv} after {res.paths} path(s)")
                return True
            res.paths += count
            if stopped:
                break
            # the paths behind an undecided branch were not run: no proof by this level's paths,
            # while a larger level may still find a counterexample or a witness
            skipped[n] = undecided
            if not undecided and not trouble and not own_trouble:
                left = int(max(0.0, until - clock()) * 1000)
                if S.covers(fam, conds, names, min(left, 10_000)):
                    finished[n] = True
            if lv == values and n not in finished and not undecided:
                finished[n] = False      # the bound itself, every path run
        return False

    levels = sorted({min(values, lv) for lv in (1, 2, 4, 8)} | {values})
    ran_out = [None]
    every = range(1, sessions + 1)
    # a first look at the smallest values, which often decides everything (a counterexample, a
    # witness, paths that cover every natural input); then every state; then one session at the
    # whole bound (few paths, and a witness of one large session is found before the levels of
    # several small ones take the time); then every level of the other numbers of sessions
    def all_covered() -> bool:
        return len(finished) == sessions and all(finished.values())

    out = level(levels[0], min(deadline, t0 + timeout * PROBE_SHARE), every)
    if out or not all_covered():
        ran_out[0] = None   # the first look's own limit is no verdict's reason
        every_state()
        # a first look that ran out of its share looks again with the whole timeout, trouble or not:
        # the workloads it did not reach may decide a claim, and a machine's speed must not
        plan = ([(levels[0], every)] if out else []) + [(values, range(1, 2))] + \
            [(lv, range(2, sessions + 1)) for lv in levels[1:]]
        for lv, ns in plan if out or not (trouble or own_trouble) else ():
            out = level(lv, deadline, ns)
            # trouble (no proof) stops the search at the end of a level of several sessions
            if out or len(finished) == sessions or ((trouble or own_trouble) and ns.stop > 2):
                break
    ran_out = ran_out[0]
    covered = all_covered()
    undecided_branches = sum(skipped.values())
    for v in res.claims.values():
        if v.verdict is not None:
            continue
        v.seconds = clock() - t0
        if ran_out is not None or trouble or v.name in own_trouble or undecided_branches or len(finished) < sessions:
            v.verdict = "unknown"
            undecided = (f"z3 could not decide {undecided_branches} branch(es), whose paths were not run"
                         if undecided_branches else None)
            v.reason = "; and ".join(x for x in (ran_out, trouble[0] if trouble else own_trouble.get(v.name), undecided,
                                                  not_every_state.get(v.name)) if x)
        else:
            v.verdict = "no_witness" if v.form == "some" else "proved"
            v.by, v.every_natural = "every path", covered
        if v.name in unreplayed:  # the kernel decided it on a workload the replay did not reach
            v.verdict, v.by, v.every_natural = "unknown", None, False
            v.reason = "; and ".join(x for x in (v.reason, "the timeout ran out replaying the workload that decides "
                                                 f"it on the kernel, {unreplayed[v.name]}") if x)
    bound["every_natural"] = [v.name for v in res.claims.values() if v.every_natural]
    return res


def _stops(err: str) -> str:
    """How the kernel ended a run: a refusal (F016: no natural is the interpreter's value) or a
    run error of the program."""
    return f"refuses {err}" if err.startswith("F") else f"stops with {err}"


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
PROBE_SHARE = 0.1   # of the timeout, the most the first look at values 0..1 may take
INDUCT_SHARE = 0.7  # of the timeout, the most the proof over every state may take (at 0.5, bari_tiling.sq's
                    # `tiled` ran out of its 30 CPU s on a slow day: a machine's speed changed its verdict)


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
    if c["status"] == status and c["at"] == at:
        return None
    return f"the interpreter reports {c['status']} at {c['at']}"


def workload_of(p: R.Program, wl: dict, trace=None) -> R.Workload:
    """A workload file's sessions as the kernel's workload."""
    out = []
    for k, s in enumerate(wl["sessions"]):
        rows = tuple(trace[k % len(trace)]) if trace else ()
        out.append(R.SessionIn(s["arrival"], tuple(s["draws"]), rows))
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
