"""Text to AST: lark (LALR, contextual lexer) and one small transformer method per rule."""
from __future__ import annotations

import functools
import importlib
import os
import pickle
import sys

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.parsers import lalr_analysis

from serq.diagnostics import SerqError, Span
from serq.lang import ast as A

_GRAMMAR = os.path.join(os.path.dirname(__file__), "grammar.lark")


FRAGMENTS = ("items", "stmts", "expr", "sstmts", "eitems", "qitems", "wlitems", "ritems", "poolopts")


_OPTIONS = dict(parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=True,
                start=["start"] + [f"frag_{f}" for f in FRAGMENTS])


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    """The LALR parser, from the per-user cache when it is there (serq/_cache.py): building its
    tables is most of a short check's CPU time. The file holds the parser object itself, pickled
    (_LarkPickler): unpickling it takes a quarter of what lark's own load (Lark.load, which builds
    the lexers and tables again from a description) takes. A file in lark's format is read too."""
    import lark

    from serq import _cache
    with open(_GRAMMAR, encoding="utf-8") as fh:
        text = fh.read()
    key = (text, repr(sorted(_OPTIONS.items())), lark.__version__, sys.version)
    path = _cache.path("parser", *key, "object")  # the object, not lark's format as before
    parser = _cache.read(path, _load_parser)
    if parser is None:
        parser = Lark(text, **_OPTIONS)
        if path is not None:
            parser = _save_parser(parser, path)
    _scanners(parser, key)
    return parser


def _load_parser(fh) -> Lark:
    parser = _LarkUnpickler(fh).load()
    if not isinstance(parser, Lark):  # lark's own format, {data, memo}
        parser = Lark.load(parser)
    return parser


def _save_parser(built: Lark, path: str) -> Lark:
    """Save the parser, returned as a cache reader will have it: lark's save and load first (the
    form lark itself keeps), then that object pickled; where it cannot be, lark's format."""
    import io

    from serq import _cache
    saved = io.BytesIO()
    built.save(saved)
    parser = Lark.load(io.BytesIO(saved.getvalue()))
    try:
        whole = io.BytesIO()
        _LarkPickler(whole, protocol=pickle.HIGHEST_PROTOCOL).dump(parser)
        data = whole.getvalue()
    except Exception:  # another lark, holding what does not pickle
        data = saved.getvalue()
    _cache.save(path, lambda fh: fh.write(data))
    return parser


class _LarkPickler(pickle.Pickler):
    """Modules (the lexer's `re`) by name, and the parse table's actions as themselves: the parser
    tests `action is Shift`, so a copy of either would be neither."""

    def persistent_id(self, obj):
        if isinstance(obj, type(sys)):
            return ("module", obj.__name__)
        if obj is lalr_analysis.Shift or obj is lalr_analysis.Reduce:
            return ("action", str(obj))
        return None


class _LarkUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        kind, name = pid
        if kind == "module":
            return importlib.import_module(name)
        if kind == "action" and name in ("Shift", "Reduce"):
            return getattr(lalr_analysis, name)
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def _scanners(parser: Lark, key: tuple) -> None:
    """The lexer's regular expressions, compiled from the per-user cache (serq/_regexes.py): made
    at first use by building every state's scanner and keeping what the re module compiled."""
    import re

    from serq import _cache, _regexes
    path = _cache.path("regexes", *key)
    if path is None or _cache.read(path, lambda fh: _regexes.install(pickle.load(fh)) or True):
        return
    if not _cache.writable(path):  # made again only where the file can be mended
        return
    try:
        before = set(re._cache)
        lexer = parser.parser.lexer  # lark's contextual lexer: a basic lexer per parser state
        for basic in list(lexer.lexers.values()) + [lexer.root_lexer]:
            basic.scanner  # built now, as a parse would at the state's first token
        snap = _regexes.snapshot([k for k in list(re._cache) if k not in before])
    except Exception:  # another lark, another Python: its regular expressions compile as usual
        return
    _cache.save(path, lambda fh: pickle.dump(snap, fh, protocol=pickle.HIGHEST_PROTOCOL))


# names the user reads in a parse error, instead of lark's terminal names
_PRETTY = {
    "SEMICOLON": "';'", "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'",
    "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "DOT": "'.'", "COLON": "':'", "EQUAL": "'='",
    "NAME": "a name", "NUMBER": "a number", "STRING": "a string", "$END": "the end of the file",
}


def _pretty(t: str) -> str:
    if t in _PRETTY:
        return _PRETTY[t]
    if t.isupper() and t.isalpha():
        return f"'{t.lower()}'"
    return t


class ParseError(SerqError):
    pass


def _span(file: str, meta) -> Span:
    if getattr(meta, "empty", False) or not hasattr(meta, "line"):
        return Span(file, 1, 1, 1, 1)
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


def _tspan(file: str, tok: Token) -> Span:
    return Span(file, tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + len(tok))


class _ToAst:
    """The tree to the AST, bottom-up: the method named after a rule gets the rule's meta (its
    place) and its transformed children. (Not lark's Transformer with `v_args(meta=True)`, which
    builds a new wrapper of the method at every node: a third of a long program's parse.)"""

    def __init__(self, file: str):
        self.file = file

    def transform(self, tree: Tree):
        children = [self.transform(c) if isinstance(c, Tree) else c for c in tree.children]
        f = getattr(self, tree.data, None)
        if f is None:
            return Tree(tree.data, children, tree.meta)
        return f(tree.meta, children)

    def sp(self, meta) -> Span:
        return _span(self.file, meta)

    def tsp(self, tok: Token) -> Span:
        return _tspan(self.file, tok)

    # -- program
    def start(self, meta, ch):
        return A.Program(tuple(ch), self.sp(meta), self.file)

    def _frag(self, meta, ch):
        return tuple(ch)

    frag_items = frag_stmts = frag_sstmts = frag_eitems = frag_qitems = frag_wlitems = _frag
    frag_ritems = frag_poolopts = _frag

    def frag_expr(self, meta, ch):
        return ch[0]

    def constant(self, meta, ch):
        name, e = ch
        inp = None
        if isinstance(e, A.Call) and e.fn.dotted == "args.number":
            inp = self._input(e)
        return A.Let(str(name), e, self.sp(meta), inp)

    def _input(self, call: A.Call):
        if len(call.args) != 2 or not isinstance(call.args[0], A.Str):
            raise ParseError("P002", 'args.number takes ("name", default)', call.span)
        return (call.args[0].value, call.args[1])

    def import_(self, meta, ch):
        return A.Use(_unquote(ch[0]), self.sp(meta))

    def names(self, meta, ch):
        return tuple(str(c) for c in ch)

    def definition(self, meta, ch):
        name, params, (body, is_block) = ch
        return A.Def(str(name), params or (), body, is_block, self.sp(meta))

    def def_expr(self, meta, ch):
        return (ch[0], False)

    def def_block(self, meta, ch):
        return (ch[0], True)

    def main(self, meta, ch):
        return A.Main(str(ch[0]), tuple(ch[1:]), self.sp(meta))

    def count(self, meta, ch):
        return ch[0]

    # -- pools
    def pool(self, meta, ch):
        name, count, *opts = ch
        return A.Pool(str(name), count, tuple(opts), self.sp(meta))

    def pool_on(self, meta, ch):
        name, owner, dev, *opts = ch
        return A.Pool(str(name), None, tuple(opts), self.sp(meta), owner=str(owner),
                      owner_dev=str(dev) if dev is not None else None)

    def _opt(kind):  # noqa: N805
        def f(self, meta, ch):
            return A.PoolOpt(kind, tuple(ch), self.sp(meta))
        return f

    opt_cap = _opt("cap")
    opt_block = _opt("block")
    opt_evict_lru = _opt("evict_lru")
    opt_preempt_none = _opt("preempt_none")
    opt_preempt_lifo = _opt("preempt_lifo")
    opt_queue_fifo = _opt("queue_fifo")
    opt_reserve_held = _opt("reserve_held")
    opt_cache_content = _opt("cache_content")
    opt_spill = _opt("spill")

    def opt_evict_by(self, meta, ch):
        return A.PoolOpt("evict_by", tuple(ch[0]), self.sp(meta))

    def opt_queue_by(self, meta, ch):
        return A.PoolOpt("queue_by", tuple(ch[0]), self.sp(meta))

    def opt_preempt_by(self, meta, ch):
        keys, requeue = ch
        return A.PoolOpt("preempt_by", (tuple(keys), requeue or "head"), self.sp(meta))

    def requeue_head(self, meta, ch):
        return "head"

    def requeue_tail(self, meta, ch):
        return "tail"

    # -- stages, devices
    def stage(self, meta, ch):
        name, count, kind = ch
        return A.Stage(str(name), count, kind, self.sp(meta))

    def kind_fifo(self, meta, ch):
        return A.Kind("fifo", ch[0], self.sp(meta))

    def kind_ps(self, meta, ch):
        return A.Kind("ps", ch[0], self.sp(meta))

    def kind_delay(self, meta, ch):
        return A.Kind("delay", None, self.sp(meta))

    def device(self, meta, ch):
        name, count, *res = ch
        return A.Device(str(name), count, tuple(res), self.sp(meta))

    def res_time(self, meta, ch):
        name, params, e = ch
        return A.TimeResource(str(name), params or (), e, self.sp(meta))

    def res_cap(self, meta, ch):
        return A.CapResource(str(ch[0]), ch[1], self.sp(meta))

    # -- engines
    def engine(self, meta, ch):
        name, count, dev, *items = ch
        return self._engine(str(name), count, str(dev), items, meta)

    def q_engine(self, meta, ch):
        dev, *items = ch
        return self._engine(None, None, str(dev), items, meta)

    def _engine(self, name, count, dev, items, meta):
        caps, states, seen = [], [], []
        fields = {"tokens": None, "granule": None, "schedule": None, "execute": None, "request": None}
        for kind, val, sp in items:
            seen.append((kind, sp))
            if kind == "cap":
                caps.append(val)
            elif kind == "state":
                states.append(val)
            elif fields[kind] is None:
                fields[kind] = val
        return A.Engine(name, count, dev, tuple(caps), fields["tokens"], fields["granule"], tuple(states),
                        fields["schedule"], fields["execute"], fields["request"], self.sp(meta), tuple(seen))

    def e_cap(self, meta, ch):
        name, count, e = ch
        return ("cap", A.EngineCap(str(name), count, e, self.sp(meta)), self.sp(meta))

    def e_tokens(self, meta, ch):
        return ("tokens", ch[0], self.sp(meta))

    def e_granule(self, meta, ch):
        return ("granule", ch[0], self.sp(meta))

    def e_state(self, meta, ch):
        return ("state", (str(ch[0]), ch[1], self.sp(meta)), self.sp(meta))

    def e_execute(self, meta, ch):
        return ("execute", ch[0], self.sp(meta))

    def e_schedule(self, meta, ch):
        lets = tuple(c for c in ch if isinstance(c, tuple))
        body = tuple(c for c in ch if not isinstance(c, tuple))
        return ("schedule", A.Schedule(lets, body, self.sp(meta)), self.sp(meta))

    def sched_let(self, meta, ch):
        return (str(ch[0]), ch[1], self.sp(meta))

    def e_request(self, meta, ch):
        params, *items = ch
        return ("request", A.Request(params or (), tuple(items), self.sp(meta)), self.sp(meta))

    def s_advance(self, meta, ch):
        only, order, each = ch
        return A.Advance(only, order, each, self.sp(meta))

    def s_admit(self, meta, ch):
        only, while_, each, taking = ch
        return A.Admit(only, while_, each, taking, self.sp(meta))

    def s_exclusive(self, meta, ch):
        return A.Exclusive(ch[0], self.sp(meta))

    def s_branch(self, meta, ch):
        cond, *rest = ch
        else_ = rest[-1] if rest and (rest[-1] is None or isinstance(rest[-1], list)) else None
        then = [c for c in rest[:-1]] if rest else []
        return A.SBranch(cond, tuple(then), tuple(else_) if else_ is not None else None, self.sp(meta))

    def s_else(self, meta, ch):
        return list(ch)

    def s_set(self, meta, ch):
        return A.SSet(str(ch[0]), ch[1], self.sp(meta))

    def only(self, meta, ch):
        return ch[0]

    def while_(self, meta, ch):
        return ch[0]

    def each(self, meta, ch):
        return ch[0]

    def order_admission(self, meta, ch):
        return ("admission", ())

    def order_by(self, meta, ch):
        return ("by", tuple(ch[0]))

    def order_decode_first(self, meta, ch):
        return ("decode_first", ())

    def taking(self, meta, ch):
        *takes, reuse = ch
        return (tuple(takes), reuse)

    def take(self, meta, ch):
        ref, e, reserve = ch
        return A.Take(ref, e, reserve, self.sp(meta))

    def reserve(self, meta, ch):
        return ch[0]

    def reuse(self, meta, ch):
        return ch[0]

    def r_prefill(self, meta, ch):
        return A.EngineRun("prefill", ch[0], ch[1], self.sp(meta))

    def r_decode(self, meta, ch):
        return A.EngineRun("decode", ch[0], ch[1], self.sp(meta))

    def r_at_admission(self, meta, ch):
        return A.AtAdmission(tuple(ch), self.sp(meta))

    def binding_s(self, meta, ch):
        return (str(ch[0]), ch[1], self.sp(meta))

    def binding(self, meta, ch):
        return (str(ch[0]), ch[1], self.sp(meta))

    def r_cache(self, meta, ch):
        return A.CacheItem(ch[0], self.sp(meta), ch[1])

    def growing(self, meta, ch):
        return ch[0]

    # -- workload
    def workload(self, meta, ch):
        f = {"arrive": None, "trace": None, "init": None, "turn": None, "session": None}
        hidden, dups = [], []
        for kind, val, sp in ch:
            if kind == "hidden":
                hidden.extend(val)
            elif f[kind] is not None:
                dups.append((kind, sp))
            else:
                f[kind] = val
        return A.Workload(f["arrive"], f["trace"], f["init"], f["turn"], f["session"], tuple(hidden),
                          self.sp(meta), tuple(dups))

    def arrive_law(self, meta, ch):
        return str(ch[0])

    def wl_arrive(self, meta, ch):
        return ("arrive", (ch[0], ch[1], self.sp(meta)), self.sp(meta))

    def wl_arrive_none(self, meta, ch):
        return ("arrive", ("none", None, self.sp(meta)), self.sp(meta))

    def wl_arrive_trace(self, meta, ch):
        return ("arrive", ("trace", None, self.sp(meta)), self.sp(meta))

    def ordered(self, meta, ch):
        return True

    def wl_trace(self, meta, ch):
        return ("trace", (_unquote(ch[0]), bool(ch[1]), self.sp(meta)), self.sp(meta))

    def wl_init(self, meta, ch):
        return ("init", ch[0], self.sp(meta))

    def wl_turn(self, meta, ch):
        return ("turn", ch[0], self.sp(meta))

    def wl_session(self, meta, ch):
        return ("session", ch[0], self.sp(meta))

    def wl_hidden(self, meta, ch):
        sp = self.sp(meta)
        return ("hidden", tuple((n, sp) for n in ch[0]), sp)

    def server(self, meta, ch):
        return A.Server(ch[0], self.sp(meta))

    # -- queues
    def queue(self, meta, ch):
        name, count, roles, *items = ch
        pools = tuple(i for i in items if isinstance(i, A.Pool))
        devices = tuple(i for i in items if isinstance(i, A.Device))
        engines = [i for i in items if isinstance(i, A.Engine)]
        serves = [i for i in items if isinstance(i, A.Serve)]
        nics = [i for i in items if isinstance(i, tuple) and i[0] == "nic"]
        entries = tuple(i for i in items if isinstance(i, A.Entry))
        order = tuple((type(i).__name__ if not isinstance(i, tuple) else "Nic",
                       i.span if not isinstance(i, tuple) else i[2]) for i in items)
        return A.Queue(str(name), count, roles or (), pools, devices,
                       engines[0] if engines else None, serves[0] if serves else None,
                       nics[0][1] if nics else None, entries, self.sp(meta), order)

    def roles(self, meta, ch):
        return tuple((str(t), self.tsp(t)) for t in ch)

    def q_serve(self, meta, ch):
        return A.Serve(ch[0], ch[1], self.sp(meta))

    def q_nic(self, meta, ch):
        return ("nic", ch[0], self.sp(meta))

    def verb(self, meta, ch):
        return str(ch[0])

    def q_entry(self, meta, ch):
        verb, params, from_, body = ch
        return A.Entry(str(verb), params, from_, body, self.sp(meta))

    def from_name(self, meta, ch):
        return str(ch[0])

    def latency(self, meta, ch):
        return ch[0]

    def share_policy(self, meta, ch):
        return str(ch[0])

    def rel_kind(self, meta, ch):
        return str(ch[0])

    def share(self, meta, ch):
        return A.Share(ch[0], self.sp(meta))

    def relation(self, meta, ch):
        left, kind, right, lat, policy = ch
        return A.Relation(str(left), kind, str(right), lat, policy, self.sp(meta))

    def gauge(self, meta, ch):
        return A.Gauge(str(ch[0]), ch[1], self.sp(meta))

    def given(self, meta, ch):
        return ch[0]

    def quant(self, meta, ch):
        return str(ch[0])

    def claim(self, meta, ch):
        name, given, (form, stage, e) = ch
        return A.Claim(str(name), given, form, stage, e, self.sp(meta))

    def claim_iter(self, meta, ch):
        return (ch[0], ch[1], ch[2])

    def claim_end(self, meta, ch):
        return ("end", None, ch[0])

    # -- statements
    def block(self, meta, ch):
        return tuple(ch)

    def st_turn(self, meta, ch):
        return A.Turn(self.sp(meta))

    def st_size(self, meta, ch):
        return A.Set(str(ch[0]), ch[1], self.sp(meta), "Size")

    def st_cost(self, meta, ch):
        return A.Set(str(ch[0]), ch[1], self.sp(meta), "Cost")

    def st_cost_fields(self, meta, ch):
        return A.CostFields(str(ch[0]), tuple(ch[1:]), self.sp(meta))

    def cost_field(self, meta, ch):
        return (str(ch[0]), ch[1])

    def attr_name(self, meta, ch):
        return ".".join(str(c) for c in ch)

    def st_set(self, meta, ch):
        return A.Set(str(ch[0]), ch[1], self.sp(meta))

    def st_observe(self, meta, ch):
        return A.Observe(str(ch[0]), ch[1], self.sp(meta))

    def hold(self, meta, ch):
        pools = tuple(c for c in ch if isinstance(c, A.HoldPool))
        rest = ch[len(pools):]
        reuse, adm, body, cache, lease = rest
        cache, content = cache if cache is not None else (None, None)
        return A.Hold(pools, reuse, adm or (), body, cache, lease, self.sp(meta), content)

    def hold_pool(self, meta, ch):
        return A.HoldPool(ch[0], ch[1], ch[2], self.sp(meta))

    def at_admission(self, meta, ch):
        return tuple(ch)

    def hold_cache(self, meta, ch):
        return (ch[0], ch[1])

    def content(self, meta, ch):
        return tuple(ch)

    def hold_lease(self, meta, ch):
        return (ch[0], ch[1])

    def st_grow(self, meta, ch):
        return A.Grow(ch[0], ch[1], self.sp(meta))

    def st_drop(self, meta, ch):
        return A.Drop(ch[0], self.sp(meta))

    def st_release(self, meta, ch):
        return A.Release(ch[0], self.sp(meta))

    def st_load(self, meta, ch):
        return A.Load(ch[0], ch[1], self.sp(meta))

    def mode(self, meta, ch):
        return str(ch[0])

    def st_run(self, meta, ch):
        ref, mode, e, growing = ch
        return A.Run((ref,), mode, e, growing, self.sp(meta))

    def st_run_multi(self, meta, ch):
        *refs, e = ch
        return A.Run(tuple(refs), None, e, None, self.sp(meta))

    def st_run_own(self, meta, ch):
        return A.Run((), None, ch[0], None, self.sp(meta))

    def else_(self, meta, ch):
        return ch[0]

    def st_branch(self, meta, ch):
        return A.Branch(ch[0], ch[1], ch[2], self.sp(meta))

    def st_branch_with(self, meta, ch):
        return A.Branch(ch[0], ch[1], ch[2], self.sp(meta), with_=True)

    def st_while(self, meta, ch):
        return A.While(ch[0], ch[1], self.sp(meta))

    def st_loop(self, meta, ch):
        return A.Loop(ch[0], self.sp(meta))

    def st_fork(self, meta, ch):
        return A.Fork(ch[0], self.sp(meta))

    def st_join(self, meta, ch):
        return A.Join(self.sp(meta))

    def st_choose(self, meta, ch):
        return A.Choose(str(ch[0]), ch[1], tuple(ch[2]), self.sp(meta))

    def st_end(self, meta, ch):
        return A.End(self.sp(meta))

    def st_mark(self, meta, ch):
        return A.Mark(str(ch[0]), self.sp(meta))

    def st_call(self, meta, ch):
        call, from_, to = ch
        if not isinstance(call, A.Call):
            raise ParseError("P003", "a statement here must be a call, `NAME (args);` or `Q.VERB (args);`",
                             getattr(call, "span", self.sp(meta)))
        return A.CallStmt(call, from_, to, self.sp(meta))

    def from_ref(self, meta, ch):
        return ch[0]

    def to_pool(self, meta, ch):
        return (ch[0], ch[1])

    def place_index(self, meta, ch):
        return ("index", ch[0])

    def place_on(self, meta, ch):
        return ("on", tuple(ch))

    def st_transfer(self, meta, ch):
        place, amount, src, dst, n = ch
        idx, on = _placement(place)
        return A.Transfer(idx, on, amount, src, dst, n, self.sp(meta))

    def st_tool(self, meta, ch):
        place, amount = ch
        idx, on = _placement(place)
        return A.Tool(idx, on, amount, self.sp(meta))

    # -- expressions
    def exprs(self, meta, ch):
        return tuple(ch)

    def number(self, meta, ch):
        return A.Num(float(ch[0]), self.sp(meta))

    def string(self, meta, ch):
        return A.Str(_unquote(ch[0]), self.sp(meta))

    def seg(self, meta, ch):
        return A.Seg(str(ch[0]), ch[1], self.sp(meta))

    def ref(self, meta, ch):
        return A.Ref(tuple(ch), self.sp(meta))

    def call(self, meta, ch):
        return A.Call(ch[0], tuple(ch[1] or ()), self.sp(meta))

    def draw(self, meta, ch):
        return A.Draw(str(ch[0]), tuple(ch[1] or ()), self.sp(meta))

    def aggregate(self, meta, ch):
        op, var, n, body = ch
        if str(op) not in ("max", "min", "sum"):
            raise ParseError("P004", f"`{op} {var} in …` is not an aggregate: write max, min or sum",
                             _tspan(self.file, op))
        return A.Aggregate(str(op), str(var), n, body, self.sp(meta))

    def agg_num(self, meta, ch):
        return A.Num(float(ch[0]), self.sp(meta))

    def agg_name(self, meta, ch):
        return A.Ref((A.Seg(str(ch[0]), None, self.sp(meta)),), self.sp(meta))

    def cond(self, meta, ch):
        return A.Cond(ch[0], ch[1], ch[2], self.sp(meta))

    def or_(self, meta, ch):
        return A.Binary("||", ch[0], ch[1], self.sp(meta))

    def and_(self, meta, ch):
        return A.Binary("&&", ch[0], ch[1], self.sp(meta))

    def _bin(op):  # noqa: N805
        def f(self, meta, ch):
            return A.Binary(op, ch[0], ch[1], self.sp(meta))
        return f

    eq, ne, lt, le, gt, ge = _bin("=="), _bin("!="), _bin("<"), _bin("<="), _bin(">"), _bin(">=")
    add, sub, mul, div, mod = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("%")

    def neg(self, meta, ch):
        return A.Unary("-", ch[0], self.sp(meta))

    def not_(self, meta, ch):
        return A.Unary("!", ch[0], self.sp(meta))


def _placement(place):
    if place is None:
        return None, None
    kind, val = place
    return (val, None) if kind == "index" else (None, val)


def _unquote(tok) -> str:
    s = str(tok)
    return s[1:-1]


def parse_text(text: str, file: str = "<input>", fragment: str | None = None):
    """Parse a whole program, or with `fragment` one of FRAGMENTS (a list of items, statements, …).
    Raises ParseError (a SerqError) with a span and a code."""
    start = "start" if fragment is None else f"frag_{fragment}"
    _check_depth(text, file)
    try:
        tree = _parser().parse(text, start=start)
    except UnexpectedInput as exc:
        raise _parse_error(exc, file) from None
    return _ToAst(file).transform(tree)


MAX_DEPTH = 100


def _check_depth(text: str, file: str):
    """Brackets nest at most MAX_DEPTH deep: deeper text is refused where it passes the limit."""
    depth, line, col = 0, 1, 1
    in_str = in_line = in_block = False
    prev = ""
    for ch in text:
        if in_line:
            in_line = ch != "\n"
        elif in_block:
            if prev == "*" and ch == "/":
                in_block = False
                ch = ""
        elif in_str:
            in_str = ch not in ('"', "\n")
        elif ch == '"':
            in_str = True
        elif prev == "/" and ch == "/":
            in_line = True
        elif prev == "/" and ch == "*":
            in_block = True
            ch = ""
        elif ch in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ParseError("P007", f"brackets nest more than {MAX_DEPTH} deep", Span(file, line, col, line, col + 1))
        elif ch in ")]}":
            depth -= 1
        if ch == "\n":
            line, col = line + 1, 1
        else:
            col += 1
        prev = ch


def read_source(path: str) -> str:
    """A program or IR file's text: P005 when it is not UTF-8, P006 when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise ParseError("P005", "the file is not UTF-8 text", Span(path, 1, 1)) from None
    except OSError as exc:
        raise ParseError("P006", f"cannot read the file: {exc.strerror or exc}", Span(path, 1, 1)) from None


def parse_file(path: str) -> A.Program:
    return parse_text(read_source(path), path)


def _parse_error(exc: UnexpectedInput, file: str) -> ParseError:
    line = getattr(exc, "line", 1) or 1
    col = getattr(exc, "column", 1) or 1
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            span = Span(file, line if line > 0 else 1, col if col > 0 else 1)
            return ParseError("P001", "unexpected end of file" + _expected(exc.expected), span)
        width = max(1, len(str(tok)))
        span = Span(file, tok.line, tok.column, tok.line, tok.column + width)
        return ParseError("P001", f"unexpected {str(tok)!r}" + _expected(exc.expected), span)
    if isinstance(exc, UnexpectedCharacters):
        span = Span(file, line, col, line, col + 1)
        return ParseError("P001", f"unexpected character {exc.char!r}" + _expected(exc.allowed or set()), span)
    if isinstance(exc, UnexpectedEOF):
        return ParseError("P001", "unexpected end of file" + _expected(exc.expected), Span(file, line, col))
    return ParseError("P001", "syntax error", Span(file, line, col))


def _expected(names) -> str:
    names = sorted({_pretty(n) for n in names if not n.startswith("__")})
    if not names:
        return ""
    if len(names) > 8:
        return f"; expected one of {', '.join(names[:8])}, …"
    return f"; expected {' or '.join(names) if len(names) < 3 else 'one of ' + ', '.join(names)}"
