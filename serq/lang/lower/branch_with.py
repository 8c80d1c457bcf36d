"""`branch with (p)` is sugar the parser rewrites to `branch (~bernoulli(p))` (*Branching*): the
IR, the interpreter and the Lean model know only the one form."""
from __future__ import annotations

from serq.lang import ast as A
from serq.lang.walk import map_block


def lower(stmts) -> tuple:
    def f(s):
        if isinstance(s, A.Branch) and s.with_:
            return A.Branch(A.Draw("bernoulli", (s.cond,), s.cond.span), s.then, s.else_, s.span)
        return s
    return map_block(stmts, lambda e: e, f)
