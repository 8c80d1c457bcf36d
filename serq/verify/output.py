"""What `serq verify` writes: the workload files its counterexamples and witnesses replay from, the
JSON object (docs/reference/cli.md) and the text, with the kernel's machine at the named iteration."""
from __future__ import annotations

import json
import math
import os
import shlex

from serq._write import OutputError, write_text
from serq.lang.lower.inputs import UsageError
from serq.ref import ir as R
from serq.verify import Result, Verdict, machine_at, workload_of
from serq.verify.invariant import REGISTERS
from serq.verify.search import number


def workload_path(file: str, claim: str, out_dir: str | None) -> str:
    stem = os.path.splitext(os.path.basename(file))[0]
    folder = out_dir if out_dir is not None else os.path.dirname(file)
    return os.path.join(folder, f"{stem}.{claim}.workload.json")


def _write(path: str, body: dict, out_dir: str | None):
    """One workload file, whole or not at all (serq/_write.py): OutputError says why not."""
    if out_dir is not None:
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    write_text(path, json.dumps(body, indent=1) + "\n")


def write_workloads(res: Result, file: str, out_dir: str | None, run_args: list,
                    unwritten: dict | None = None) -> dict:
    """Each deciding workload to its file, and each claim at end's first workload whose path does
    not end to `STEM.CLAIM.unended.workload.json`; claim name -> the replaying argv (None without
    one), and `(claim, "unended")` -> that one's {"workload", "replay", "why"}. A file that cannot
    be written raises OutputError, or with `unwritten` is noted there (the same keys -> the error)
    and the others are still written: the verdicts are printed with what was not."""
    replay = {}

    def put(key, path, body):
        try:
            _write(path, body, out_dir)
        except OutputError as exc:
            if unwritten is None:
                raise
            unwritten[key] = str(exc)
            return False
        return True

    for v in res.claims.values():
        replay[v.name] = None
        if v.workload is not None:
            path = workload_path(file, v.name, out_dir)
            if put(v.name, path, {"program": os.path.basename(file), "claim": v.name, "verdict": v.verdict,
                                  "iteration": v.iteration, "at": v.at, "sessions": v.workload["sessions"]}):
                replay[v.name] = ["serq", "run", file, "--workload", path] + run_args
        if v.unended is not None:
            wl, why = v.unended
            path = workload_path(file, f"{v.name}.unended", out_dir)
            written = put((v.name, "unended"), path, {"program": os.path.basename(file), "claim": v.name,
                                                      "unended": why, "sessions": wl["sessions"]})
            replay[(v.name, "unended")] = {"workload": path if written else None,
                                           "replay": (["serq", "run", file, "--workload", path] + run_args
                                                      if written else None), "why": why}
    return replay


def write_disagreement(d, file: str, out_dir: str | None) -> str:
    """The workload the kernel and the interpreter read differently, as `serq run --workload` reads
    it (`STEM.CLAIM.disagreement.workload.json`); its path."""
    path = workload_path(file, f"{d.claim}.disagreement", out_dir)
    body = {"program": os.path.basename(file), "claim": d.claim, "kernel": d.kernel,
            "interpreter": d.interpreter, "sessions": d.workload["sessions"]}
    _write(path, body, out_dir)
    return path


def read_workload(path: str) -> dict:
    """A workload file (`serq run --workload`): {"sessions": [{"arrival": t, "draws": [v, ...]}, ...]},
    arrival times finite numbers >= 0, nondecreasing (serial order), every draw a natural."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the workload {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: the workload is not JSON: {exc}") from None
    sessions = data.get("sessions") if isinstance(data, dict) else None
    if not isinstance(sessions, list) or not sessions:
        raise UsageError(f"{path}: a workload is an object whose `sessions` is a non-empty list")
    last = 0

    def nat(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def time(v):
        return nat(v) or (isinstance(v, float) and math.isfinite(v) and v >= 0)

    for k, s in enumerate(sessions):
        if not isinstance(s, dict) or not time(s.get("arrival")) or not isinstance(s.get("draws"), list) \
                or not all(nat(d) for d in s["draws"]):
            raise UsageError(f"{path}: session {k} is {{\"arrival\": a time >= 0, \"draws\": [naturals]}}")
        if s["arrival"] < last:
            raise UsageError(f"{path}: session {k} arrives at {s['arrival']}, before session {k - 1} ({last})")
        last = s["arrival"]
    return data


def workload_table(sessions: list) -> list:
    lines = [f"  {'session':>7}  {'arrival':>7}  draws"]
    for k, s in enumerate(sessions):
        lines.append(f"  {k:>7}  {s['arrival']:>7}  {' '.join(str(d) for d in s['draws']) or '-'}")
    return lines


def machine_lines(p: R.Program, v: Verdict, trace) -> list:
    """The kernel's machine as the named iteration started: its batch, the residents, the memory."""
    m = machine_at(p, workload_of(p, v.workload, trace), v.iteration)
    if m is None:
        return []
    reqs = {r.rid: r for r in m.eng.reqs}
    out = [f"  machine at iteration {v.iteration} (time {number(m.now)}, the reference kernel):"]
    batch = ", ".join(f"session {reqs[rid].sid} {reqs[rid].mode} {n}" for rid, n in m.eng.batch if rid in reqs)
    out.append(f"    batch: {batch or 'empty'} ({sum(n for _, n in m.eng.batch)} tokens)")
    res = ", ".join(f"session {r.sid} {r.mode} ({r.left} left)" for r in m.eng.reqs)
    out.append(f"    residents: {res or 'none'}")
    for pool, st in zip(p.pools, m.pools):
        cap = "inf" if pool.cap is None else str(pool.cap)
        queue = ", ".join(str(q.sid) for q in st.queue)
        out.append(f"    {pool.name}: {st.used}/{cap} used, {sum(e.units for e in st.entries)} cached"
                   + (f", waiting: session {queue}" if queue else ""))
    return out


def replay_head(prog, wl: dict, path: str) -> str:
    """`serq run --workload`'s text before the report: the workload, and when verify named an
    iteration of a fragment program, the reference kernel's machine as it started."""
    out = [f"workload {path}:"] + workload_table(wl["sessions"])
    it = wl.get("iteration")
    if isinstance(it, int) and not isinstance(it, bool) and it >= 0:
        from serq.diagnostics import SerqError
        from serq.ref.exec import KernelError
        from serq.ref.fragment import convert
        try:
            p = convert(prog)
            trace = None
            if p.trace:
                from serq.leangen import trace_rows
                trace = trace_rows(prog)
            out += machine_lines(p, Verdict(str(wl.get("claim")), "", workload=wl, iteration=it), trace)
        except (SerqError, KernelError):
            pass  # outside the fragment, or the kernel stops: the report says what the run did
    return "\n".join(out)


def as_json(res: Result, replay: dict, unwritten: dict | None = None) -> dict:
    """The verdicts as one object (cli.md). A workload that could not be written is given in full
    under `not_written` ({"error", "sessions"}; `replay` null), so that nothing found is lost."""
    unwritten = unwritten or {}
    claims = {}
    for v in res.claims.values():
        c = {"verdict": v.verdict, "replay": replay.get(v.name), "iteration": v.iteration,
             "seconds": round(v.seconds, 3)}
        if v.name in unwritten:
            c["not_written"] = {"error": unwritten[v.name], "sessions": v.workload["sessions"]}
        if v.by is not None:
            c["by"] = v.by
        if v.invariant is not None:
            c["invariant"] = v.invariant
            c["inductive"] = True   # every move of the encoded step keeps it (serq/verify/step.py)
        if v.unrolled is not None:
            c["unrolled"] = v.unrolled
        if v.per_session is not None:
            c["per_session"] = v.per_session   # what each turn observes, the lemma on a hold it needs
        if v.within_bound is not None:
            c["within_bound"] = v.within_bound   # the bound's invariants that proved it (by "bound")
        if v.margin is not None:
            c["margin"] = v.margin   # the proof holds with a margin the simulator's rounding cannot cross
        if v.reason is not None:
            c["reason"] = v.reason
        if v.form == "end":  # whether every path in the bound ended (null), else the first that did not
            c["unended"] = replay.get((v.name, "unended"))
            if (v.name, "unended") in unwritten:
                c["unended"] = {**c["unended"], "not_written": {"error": unwritten[(v.name, "unended")],
                                                                "sessions": v.unended[0]["sessions"]}}
        claims[v.name] = c
    return {"bound": res.bound, "claims": claims}


def as_text(res: Result, file: str, replay: dict, unwritten: dict | None = None) -> str:
    unwritten = unwritten or {}
    b = res.bound
    n = b["sessions"]
    sessions = "1 session" if n == 1 else f"1 to {n} sessions"
    head = (f"serq verify {file}: every workload of {sessions}, drawn values 0..{b['values']}"
            + (f", arrival gaps 0..{b['gap']}" if "gap" in b else f", arrive {b['arrive']}")
            + f"; {res.paths} path(s) run")
    out = [head]
    for v in res.claims.values():
        line = f"claim {v.name}: {v.verdict}"
        if v.by == "floating point" and v.workload is not None and v.form != "end":
            line += f" at time {v.at}"
        elif v.iteration is not None:
            line += f" at iteration {v.iteration} (time {v.at})"
        elif v.at is not None:
            line += f" at the end (time {v.at})"
        if v.workload is not None:
            line += (", on a sampled workload" if v.by == "sample" else
                     ", run in floating point (a tie over the reals)" if v.by == "floating point" else
                     f", found unrolling the first {v.unrolled} iteration(s) of every workload" if v.by == "unrolled"
                     else ", found by the search")
        if v.margin:
            line += " with a margin of a billionth (no rounding of the simulator's crosses it),"
        if v.by == "induction":
            line += " by induction, for every number of sessions, every value and arrival time"
        elif v.by == "per session":
            line += (" per session, for every number of sessions, every value and arrival time" if v.every_value else
                     f" per session, for every number of sessions and arrival time, each draw 0..{res.bound['values']} "
                     "(the bound's values; not for every value)")
        elif v.by == "vacuous":
            line += (" vacuously, for every number of sessions, every value and arrival time: under closed(n) "
                     "no path ends, and a claim at end reads only the paths that end")
        elif v.by == "bound":
            b = res.bound
            line += (f" within the bound (at most {b['sessions']} sessions, values 0..{b['values']}), from the "
                     "invariants the bound implies (not for every value or number of sessions)")
        elif v.by == "every state":
            line += " (on every machine an iteration can start from: every natural value and arrival time, " \
                    "at most the bound's sessions)"
        elif v.by == "every path":   # how, and over which family (the header's bound)
            line += (" on every path of the bound" + (f", unrolled to {v.unrolled} into one formula (no path has "
                     f"more iterations)" if v.unrolled is not None else "")
                     + (" (for every natural value and real arrival time, with at "
                        "most the bound's sessions)" if v.every_value else ""))
        u = replay.get((v.name, "unended"))
        if u is not None:
            line += f"; a path does not end: {u['why']}"
        elif v.form == "end" and v.verdict == "proved" and v.by not in ("per session", "vacuous", "bound"):
            line += "; every path in the bound ended"
        line += f"  [{v.seconds:.2f} s]"
        out.append(line)
        if v.invariant:
            out.append("  invariant: " + " && ".join(v.invariant))
            if not v.invariant[0].startswith(REGISTERS):
                out.append("  inductive: every move of the kernel's encoded step keeps it, with any number of sessions")
        if v.within_bound:
            out += [f"  within the bound: {x}" for x in v.within_bound]
        if v.per_session:
            out.append(f"  per session: {v.per_session[0]}")
            out.append(f"  lemma: {v.per_session[1]}")
            for inv in v.per_session[2:]:   # what Spacer found a session keeps (serq/verify/session.py)
                out.append(f"  invariant {inv}")
        if v.reason:
            out.append(f"  why: {v.reason}")
        if u is not None:
            out.append("  unended: " + (shlex.join(u["replay"]) if u["replay"] is not None else
                                        f"(the workload is not written: {unwritten.get((v.name, 'unended'))})"))
            out += workload_table(v.unended[0]["sessions"])
        if replay.get(v.name) or v.name in unwritten:
            out.append("  replay: " + shlex.join(replay[v.name]) if replay.get(v.name) else
                       f"  workload (not written: {unwritten[v.name]}):")
            out += workload_table(v.workload["sessions"])
            if v.iteration is not None:
                out += machine_lines(res.prog, v, res.trace)
    return "\n".join(out)
