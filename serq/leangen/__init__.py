"""serQ's Lean generator: a fragment program's IR as a Lean value of `Serq.Program`, its claims as
Lean statements about it (`serq claims`, docs/leangen.md).

It reads the linked IR through the fragment's one converter (`serq.ref.fragment.convert`, which
decides what is in the fragment) and never the program's text. Output is byte-identical from run
to run: the templates iterate tuples in the IR's order, and nothing reads the clock or a dict's
or set's order.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import jinja2

from serq.diagnostics import SerqError, Span
from serq.ir import model as I
from serq.leangen import terms as T
from serq.ref import ir as R
from serq.ref.fragment import convert

__all__ = ["generate", "program_fields", "render", "ClaimsFile"]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("serq.leangen", "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)


def render(template: str, **ctx) -> str:
    return _ENV.get_template(template).render(**ctx)


@dataclass(frozen=True)
class ClaimsFile:
    text: str          # the Lean file
    claims: int        # how many claims it states


def program_fields(p: R.Program) -> dict:
    """The rendered fields of `Serq.Program` for program_value.lean.j2 (continuation lines indented
    under the field that starts them)."""
    e = p.engine
    engine = {
        "name": T.string(e.name),
        "budget": T.opt_expr(e.budget),
        "chunk": T.expr(e.chunk),
        "granule": T.opt_expr(e.granule),
        "exclusive": T.boolean(e.exclusive),
        "serve_keys": T.flat_list(e.keys, T.expr),
        "body": T.lines(e.body, T.istmt, 6),
        "cost": T.expr(e.cost),
        "registers": T.registers(e.registers),
    }
    return {
        "pools": T.lines(p.pools, T.pool, 4),
        "engine": render("engine_value.lean.j2", e=engine),
        "arrive": f"Arrive.{T.ARRIVE[p.arrive]}",
        "gap": T.rational(p.gap),
        "n": T.nat(p.n),
        "trace": T.boolean(p.trace),
        "init": T.lines(p.init, T.stmt, 4),
        "turn": T.lines(p.turn, T.stmt, 4),
        "session": "none" if p.session is None else f"some {T.lines(p.session, T.stmt, 4)}",
        "server": T.lines(p.server, T.stmt, 4),
        "claims": T.lines(p.claims, T.claim, 4),
        "stages": T.lines(p.stages, T.stage, 4),
    }


def namespace(source: str) -> str:
    """The generated file's namespace, from the program file's name: `SerqGen.VllmRequest`."""
    stem = os.path.splitext(os.path.basename(source))[0]
    return f"SerqGen.{T.camel(stem)}"


def trace_rows(prog: I.Program) -> list:
    """The rows of the program's trace, as naturals: the trace file read as `serq run` reads it (its
    T diagnostics), a value that is not a whole number refused as outside the fragment (F001)."""
    from serq.interp.trace import load_trace
    tr = prog.workload.trace
    out = []
    for sess in load_trace(tr.file):
        rows = []
        for rec in sess:
            vals = []
            for k in ("new", "out", "think", "forced", "stream", "parent", "common"):
                if rec[k] != int(rec[k]):
                    raise SerqError("F001", f"the trace's `{k}` {rec[k]:g} (session {rec['_session']!r}, turn "
                                    f"{rec['turn']:g}), not a natural, is outside the Lean fragment (docs/lean.md)",
                                    Span(tr.file, 1, 1))
                vals.append(int(rec[k]))
            rows.append(R.Row(*vals))
        out.append(rows)
    return out


def generate(prog: I.Program, source: str | None = None, ns: str | None = None) -> ClaimsFile:
    """The Lean file of a linked program: raises the fragment check's diagnostic (an F-code) for a
    program outside the fragment. `source` names the program in the header (default: its file);
    `ns` the namespace (default: from `source`, `namespace`)."""
    p = convert(prog)
    source = source or (prog.files[0] if prog.files else "<ir>")
    from serq.leangen.claims import statements
    rows = T.trace(trace_rows(prog), 2) if p.trace else None
    text = render("program.lean.j2", source=T.comment(source), ns=ns or namespace(source), name="program",
                  p=program_fields(p), trace=rows, claims=statements(p, "trace" if p.trace else "[]"))
    return ClaimsFile(text, len(p.claims))
