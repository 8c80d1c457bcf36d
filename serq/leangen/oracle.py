"""lean/Serq/Oracle.lean from the recorded vLLM scenarios (tools/gen_oracle_lean.py builds the
scenarios, this renders them): each scenario's program value and workload, and a theorem that
the run gives vLLM's answers. The program values differ in a few constants only, so each distinct
field (pools, engine, statements) is written once as a `def` and the programs name it."""
from __future__ import annotations

from serq.leangen import program_fields, render
from serq.leangen import terms as T

TACTIC = "decide +kernel"  # docs/leangen.md: the kernel evaluates the run, no compiler trusted
# the reference's `vllm_cache_trace`: the recorded scenario of conversations hitting their own
# earlier turns' blocks and a request hitting another session's
CACHE_TRACE = "09_prefix_caching_multiturn"

# the fields written once and named; their Lean types
SHARED = {"pools": "List Pool", "engine": "Engine", "init": "List Stmt", "turn": "List Stmt",
          "session": "Option (List Stmt)", "server": "List Stmt", "claims": "List Claim"}


def _shared_fields(scenarios) -> tuple[list, list]:
    """The shared defs [(name, type, text)] in first-use order, and each program's fields."""
    names: dict = {}
    defs: list = []
    progs: list = []
    for s in scenarios:
        f = program_fields(s.prog)
        for k, ty in SHARED.items():
            key = (k, f[k])
            if key not in names:
                names[key] = f"{k}_{sum(1 for d in defs if d[0].startswith(k + '_')) + 1}"
                defs.append((names[key], ty, f[k]))
            f[k] = names[key]
        progs.append(f)
    return defs, progs


def render_oracle(scenarios) -> str:
    kept = [s for s in scenarios if s.differs is None]
    defs, fields = _shared_fields(kept)
    items = []
    seen: set = set()
    for s, f in zip(kept, fields):
        base = T.ident_part(s.name)  # always after a prefix (program_, workload_, vllm_)
        while base in seen:
            base += "_"
        seen.add(base)
        reqs = ", ".join(f"({si}, {ti})" for _rid, si, ti, *_ in s.expected)
        answers = ", ".join(f"({_opt(a)}, {_opt(b)}, {_opt(c)})" for *_x, a, b, c in s.expected)
        who = T.comment(", ".join(f"{rid} (session {si}, turn {ti})" for rid, si, ti, *_ in s.expected))
        items.append({
            "name": T.comment(s.name), "path": T.comment(s.path), "base": base, "fields": f,
            "workload": T.workload(s.wl, 0), "horizon": T.nat(s.horizon),
            "reqs": reqs, "answers": answers, "who": who, "fuel": T.nat(s.moves),
        })
    left = [(T.comment(s.name), T.comment(s.differs)) for s in scenarios if s.differs is not None]
    trace = next((dict(it, hits=", ".join(_opt(h) for h in s.hits)) for s, it in zip(kept, items)
                  if s.name == CACHE_TRACE and s.hits), None)
    return render("oracle.lean.j2", defs=defs, items=items, left=left, tactic=TACTIC, tried=len(scenarios),
                  trace=trace)


def _opt(v) -> str:
    return "none" if v is None else f"some {T.nat(v)}"
