"""Expressions and names as the picture writes them: as the program's source wrote them where the
IR's locations allow it, else in the language's own spelling, never clipped (a box wraps them)."""
from __future__ import annotations

import contextlib
import contextvars
import re

from serq.diagnostics import SerqError
from serq.ir import model as I
from serq.lang.lower.constants import fmt

# a step stage's values as the program writes them (*Engines on devices*)
STEP_NAMES = {"Nres": "running.count", "Ndec": "running.decoding", "Kvb": "kv_decode", "Kvp": "kv_prefill",
              "Preempted": "running.preempted", "Admitted": "waiting.admitted", "Ntok": "batch.tokens",
              "Npre": "batch.prefilled", "Attn": "batch.attention", "Queued": "waiting.count"}
PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "+": 5, "-": 5,
        "*": 6, "/": 6, "%": 6}
EXPRS = (I.Num, I.Inf, I.Attr, I.Ctx, I.StepVar, I.Reg, I.Obs, I.Agg, I.Un, I.Bin, I.If, I.Fn, I.Draw, I.Cost)


def number(v: float) -> str:
    """A number as the diagnostics write it, or to four digits when that is long (0.1 + 0.2)."""
    s = fmt(v)
    return s if len(s) < 12 else f"{v:.4g}"


def member(name: str, index: str | None) -> str:
    """A pool or stage as a path names it: a queue's member's own part after the member's index
    (the IR's R.kv[r] is R[r].kv in the program)."""
    if index is None:
        return name
    head, dot, rest = name.partition(".")
    return f"{head}[{index}].{rest}" if dot else f"{name}[{index}]"


def target(t: I.Target) -> str:
    return member(t.name, None if t.index is None else src(t.index))


def expr(e, prec: int = 0) -> str:
    """`e` in the language's syntax from the IR alone, parenthesised where its operators need it:
    what the drawer compares against the forms the parser writes (`decode first`)."""
    return _render(e, prec, expr, lambda t: t.name if t.index is None else f"{t.name}[{expr(t.index)}]")


def src(e, prec: int = 0) -> str:
    """`e` as the program's source wrote it where its location gives that text, else rendered from
    its parts, each again as the source wrote it where it can be."""
    if isinstance(e, I.Cost):  # the nominal type says nothing a reader needs here
        return src(e.e, prec)
    source = _SOURCE.get()
    text = source.text(e) if source is not None else None
    if text is None:
        return _render(e, prec, src, target)
    # the text's own operator binds it, not the IR's (a number folded from `a + b` is a sum)
    return f"({text})" if source.binding(text) < prec and not _wrapped(text) else text


def valued(e) -> str:
    """`e` as the source wrote it and, when that is not its number already, the number the
    constants and inputs give it: `lambda = 0.5`, `blocks * bs = 65536`."""
    from serq.link.exprs import const_value
    v = const_value(e)
    source = _SOURCE.get()
    if v is not None and (source is None or source.text(e.e if isinstance(e, I.Cost) else e) is None):
        return number(v)  # the IR's own form of a constant is its operands folded already: the number
    s = src(e)
    if v is None or s == number(v) or s in ("inf", "-inf") and v in (float("inf"), float("-inf")):
        return s
    return f"{s} = {number(v)}"


def constants_in(*es) -> list[str]:
    """`name = value` for each constant the source names in the expressions (the numbers the
    inputs gave), in the order first read."""
    source = _SOURCE.get()
    out: list[str] = []
    for e in es:
        for x in _all(e) if source is not None and e is not None else []:
            if isinstance(x, I.Num) and x.at is not None:
                name = source.clean(x.at)
                if name in source.constants:  # the let's value (an inf chunk cap is the IR's 0)
                    item = f"{name} = {number(source.constants[name])}"
                    if item not in out:
                        out.append(item)
    return out


def _render(e, prec, sub, tgt) -> str:
    if isinstance(e, I.Num):
        return number(e.v)
    if isinstance(e, I.Inf):
        return "inf"
    if isinstance(e, (I.Attr, I.Ctx)):
        return e.name
    if isinstance(e, I.StepVar):
        n = STEP_NAMES[e.name]
        return ("batch." if e.batch else "running.") + n if n.startswith("kv_") else n
    if isinstance(e, I.Reg):
        return e.name
    if isinstance(e, I.Obs):
        return f"{e.fn}({tgt(e.of)})"
    if isinstance(e, I.Agg):
        return f"{e.fn}({e.name})"
    if isinstance(e, I.Un):
        return e.op + sub(e.e, 7)
    if isinstance(e, I.Bin):
        p = PREC[e.op]
        s = f"{sub(e.l, p)} {e.op} {sub(e.r, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, I.If):
        s = f"{sub(e.c, 1)} ? {sub(e.a, 1)} : {sub(e.b, 1)}"
        return f"({s})" if prec > 0 else s
    if isinstance(e, I.Fn):
        return f"{e.name}({', '.join(sub(a) for a in e.args)})"
    if isinstance(e, I.Draw):
        return f"~{e.dist}({', '.join(sub(a) for a in e.args)})"
    if isinstance(e, I.Cost):
        return sub(e.e, prec)
    return "?"


def _wrapped(text: str) -> bool:
    """Whether the text is one parenthesised whole, `(a + b)`, not `(a) + (b)`."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(text) - 1:
            return False
    return True


def base(name: str) -> str:
    """A queue's member's own name (P.kv -> kv), as the queue's body calls it."""
    return name.rsplit(".", 1)[-1]


# ------------------------------------------------------------------ the source text


def children(e) -> list:
    """The expressions directly inside `e`, a target's index included."""
    out = []
    for k in type(e).model_fields:
        v = getattr(e, k)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, I.Target):
                x = x.index
            if isinstance(x, EXPRS):
                out.append(x)
    return out


class Source:
    """The text of the files a program was loaded from (its IR's `files`), for the expressions
    whose location still names what they are. A file that cannot be read gives no text."""

    def __init__(self, prog: I.Program, texts: list[str | None] | None = None):
        if texts is None:
            texts = []
            for f in prog.files:
                try:
                    with open(f, encoding="utf-8") as fh:
                        texts.append(fh.read())
                except (OSError, UnicodeDecodeError, ValueError):
                    texts.append(None)
        self.files = list(prog.files)
        self.constants = dict(prog.constants)
        self.texts = list(texts) + [None] * (len(self.files) - len(texts))
        self.lines = [t.split("\n") if t is not None else None for t in self.texts]
        self.memo: dict = {}
        self.ops: dict[str, int] = {}   # a text given -> how tightly it binds
        self.trees: dict = {}
        self.binds: dict | None = None

    def tree(self, i: int):
        """File i's syntax tree, or None (no text, or text that no longer parses)."""
        if i not in self.trees:
            self.trees[i] = None
            if i < len(self.texts) and self.texts[i] is not None:
                from serq.lang.parse import parse_text
                try:
                    self.trees[i] = parse_text(self.texts[i], self.files[i])
                except (SerqError, RecursionError):
                    pass
        return self.trees[i]

    def bindings(self) -> dict:
        """Each `at admission` binding by where its expression is written: (its name, its group's
        bindings in order). The lowering substitutes a binding where its name is read, so the
        expression there keeps the binding's location."""
        if self.binds is None:
            from serq.lang import ast as A
            self.binds = {}
            for i in range(len(self.files)):
                for node in nodes(self.tree(i), A.Hold, A.AtAdmission):
                    group = [(n, e.span) for n, e, _ in node.bindings]
                    for n, e, _ in node.bindings:
                        sp = e.span
                        self.binds[(i, sp.line, sp.col, sp.end_line, sp.end_col)] = (n, group, i)
        return self.binds

    def raw(self, at) -> str | None:
        if at is None or not at.end_line or at.file >= len(self.lines) or self.lines[at.file] is None:
            return None
        lines = self.lines[at.file]
        if not (1 <= at.line <= at.end_line <= len(lines)):
            return None
        if at.line == at.end_line:
            return lines[at.line - 1][at.col - 1:at.end_col - 1]
        return "\n".join([lines[at.line - 1][at.col - 1:]] + lines[at.line:at.end_line - 1]
                         + [lines[at.end_line - 1][:at.end_col - 1]])

    def clean(self, at) -> str | None:
        """The text at `at` on one line: comments gone, spaces collapsed."""
        raw = self.raw(at)
        if raw is None:
            return None
        text = " ".join(re.sub(r"//.*", "", line).strip() for line in raw.split("\n"))
        return re.sub(r"\s+", " ", re.sub(r"/\*.*?\*/", " ", text)).strip() or None

    def text(self, e) -> str | None:
        """`e`'s own text, one line, or None when its location does not name it alone: a location
        around more than the expression (a statement's), or an expression the lowering put
        together from text written elsewhere (a def's body around its argument). A binding's
        name read in the text stands for its expression (noted for the caller: `at admission`)."""
        at = getattr(e, "at", None)
        if at is None:
            return None
        # one location can hold several expressions (a def's body, inlined at each call)
        key = (e.k, at, tuple(getattr(x, "at", None) for x in _below(e)))
        if key not in self.memo:
            self.memo[key] = self._text(e, at)
        text, used, own = self.memo[key]
        if text is not None:
            self.ops[text] = own
        notes = _USED.get()
        if text is not None and notes is not None:
            for b in used:
                if b not in notes:
                    notes.append(b)
        return text

    def binding(self, text: str) -> int:
        """How tightly a text this source gave binds: its top operator's precedence (PREC), 0 for a
        conditional, more than any for a name, a number or a call."""
        return self.ops.get(text, 99)

    def _text(self, e, at):
        b = self.bindings().get((at.file, at.line, at.col, at.end_line, at.end_col))
        if b is not None:  # a binding substituted whole: the name the program read there
            name, group, f = b
            return name, self._group(group, name, f), 99
        text = self.clean(at)
        if text is None:
            return None, [], 99
        from serq.lang import ast as A
        from serq.lang.parse import parse_text
        try:
            tree = parse_text(text, "<draw>", fragment="expr")
        except (SerqError, RecursionError):
            return None, [], 99
        if not _alike(tree, e, A):
            return None, [], 99
        own = PREC[tree.op] if isinstance(tree, A.Binary) else 0 if isinstance(tree, A.Cond) else \
            7 if isinstance(tree, A.Unary) else 99
        names = {r.dotted for r in nodes(tree, A.Ref)}
        used: list = []

        def inside(x) -> bool:
            if _inside(x, at):
                return all(inside(c) for c in children(x))
            a = getattr(x, "at", None)
            b = self.bindings().get((a.file, a.line, a.col, a.end_line, a.end_col)) if a is not None else None
            if b is None or b[0] not in names:
                return False
            for item in self._group(b[1], b[0], b[2]):
                if item not in used:
                    used.append(item)
            return True
        if not all(inside(c) for c in children(e)):
            return None, [], 99
        return text, used, own

    @staticmethod
    def _group(group, name, f) -> list:
        """A binding and the earlier ones of its group, which its expression may read."""
        return [(n, f, sp.line, sp.col, sp.end_line, sp.end_col)
                for n, sp in group[:[g[0] for g in group].index(name) + 1]]

    def binding_text(self, item) -> str:
        n, f, line, col, end_line, end_col = item
        return f"{n} = {self.clean(I.Loc(file=f, line=line, col=col, end_line=end_line, end_col=end_col))}"


def nodes(tree, *kinds):
    """Every node of a syntax tree of the given kinds, in source order."""
    import dataclasses
    if isinstance(tree, kinds):
        yield tree
    if isinstance(tree, (tuple, list)):
        for x in tree:
            yield from nodes(x, *kinds)
    elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for f in dataclasses.fields(tree):
            yield from nodes(getattr(tree, f.name), *kinds)


_USED: contextvars.ContextVar[list | None] = contextvars.ContextVar("serq_draw_bindings", default=None)


@contextlib.contextmanager
def bindings_read():
    """The `at admission` bindings the expressions printed inside read, as `name = text` lines."""
    token = _USED.set([])
    out: list[str] = []
    try:
        yield out
    finally:
        used = _USED.get()
        _USED.reset(token)
        source = _SOURCE.get()
        if source is not None:
            out += [source.binding_text(b) for b in sorted(used, key=lambda b: b[1:4])]


def _all(x):
    """Every expression in `x`, an expression or a statement (an engine's schedule's)."""
    if isinstance(x, EXPRS):
        yield x
        yield from _below(x)
    elif isinstance(x, I.Node):
        for k in type(x).model_fields:
            v = getattr(x, k)
            for y in (v if isinstance(v, list) else [v]):
                if isinstance(y, (I.Node, list)):
                    yield from _all(y)
    elif isinstance(x, list):
        for y in x:
            yield from _all(y)


def _below(e):
    for c in children(e):
        yield c
        yield from _below(c)


def _inside(x, at: I.Loc) -> bool:
    a = getattr(x, "at", None)
    return (a is not None and a.file == at.file and (a.line, a.col) >= (at.line, at.col)
            and (a.end_line, a.end_col) <= (at.end_line, at.end_col))


def _alike(tree, e, A) -> bool:
    """Whether the parsed text can be what the IR holds: a name or a call can be anything (a
    constant, a def, an engine's value); an operator is that operator or folded to a number."""
    if isinstance(tree, A.Ref):
        return True
    if isinstance(tree, A.Call):
        return tree.fn.dotted != "cost"  # `cost(R, e)` is a statement's argument, not e
    folded = isinstance(e, (I.Num, I.Inf))
    if isinstance(tree, A.Num):
        return isinstance(e, I.Num) and tree.value == e.v
    if isinstance(tree, A.Binary):
        return folded or isinstance(e, I.Bin) and e.op == tree.op or isinstance(e, I.Un)
    if isinstance(tree, A.Unary):
        return folded or isinstance(e, (I.Un, I.Bin, I.If))
    if isinstance(tree, A.Cond):
        return folded or isinstance(e, I.If)
    if isinstance(tree, A.Draw):
        return isinstance(e, I.Draw) and e.dist == tree.dist
    if isinstance(tree, A.Aggregate):
        return folded or isinstance(e, (I.Fn, I.Bin))
    return False


_SOURCE: contextvars.ContextVar[Source | None] = contextvars.ContextVar("serq_draw_source", default=None)


@contextlib.contextmanager
def reading(source: Source | None):
    """Draw with `source` as the text expressions are printed from (the many small functions that
    print one need not pass it along)."""
    token = _SOURCE.set(source)
    try:
        yield
    finally:
        _SOURCE.reset(token)
