"""lean/Serq/Oracle.lean and its parts lean/Serq/Oracle/PartNN.lean from the recorded vLLM
scenarios (tools/gen_oracle_lean.py builds the scenarios, this renders them): each scenario's
program value and workload, and a theorem that the run gives vLLM's answers. The program values differ in a few constants only, so each distinct
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


def render_oracle(scenarios, stated, parts, budget: str = "") -> dict[str, str]:
    """{path under lean/Serq: text}: `Oracle.lean` (the readers and shared fields) and each part
    `Oracle/PartNN.lean` (its scenarios' programs, workloads and theorems). `stated`: the scenarios
    given a theorem (each agrees on the reference kernel), `parts` their indices, part by part;
    `budget` says why the other agreeing ones have none."""
    kept = list(stated)
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
            "reqs": reqs, "answers": answers, "who": who, "fuel": T.nat(s.moves), "calls": s.calls,
        })
    left = [(T.comment(s.name), T.comment(s.differs)) for s in scenarios if s.differs is not None]
    ids = {id(s) for s in kept}
    unstated = [T.comment(s.name) for s in scenarios if s.differs is None and id(s) not in ids]
    intro = _fill(f"{len(items)} theorems of {len(scenarios)} scenarios tried: a theorem is written only where the "
                  f"reference kernel (serq/ref/, the Python twin of Exec.lean) evaluates the same statement true, "
                  f"and only as many as `make check` checks in CI: {budget}. The named scenarios are all stated, "
                  f"then the families' (the main random ones and each extra family) in turn.")
    unstated = _fill("Agreeing with vLLM on the Python twin (`python tools/vllm_oracle.py check --ref`) and not "
                     "stated here, for the kernel's cost: " + ", ".join(f"`{n}`" for n in unstated) + ".") if unstated else ""
    trace = next((dict(it, hits=", ".join(_opt(h) for h in s.hits)) for s, it in zip(kept, items)
                  if s.name == CACHE_TRACE and s.hits), None)
    out = {"Oracle.lean": render("oracle.lean.j2", defs=defs, items=items, left=left, intro=intro,
                                 parts=parts, unstated=unstated)}
    for n, idx in enumerate(parts, 1):
        chunk = [items[i] for i in idx]
        out[f"Oracle/Part{n:02d}.lean"] = render(
            "oracle_part.lean.j2", items=chunk, part=n, parts=len(parts), tactic=TACTIC, trace=trace,
            calls=sum(it["calls"] for it in chunk))
    return out


def _fill(text: str) -> str:
    import textwrap
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def _opt(v) -> str:
    return "none" if v is None else f"some {T.nat(v)}"
