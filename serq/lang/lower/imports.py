"""`use` and `fn main` (*Entry point and external inputs*): one main, nothing but imports,
definitions and constants before it, libraries without an entry point."""
from __future__ import annotations

import os

from serq.diagnostics import SerqError
from serq.lang import ast as A
from serq.lang.parse import parse_file

STD = {"std/args"}


class Resolved:
    def __init__(self):
        self.main: A.Main | None = None
        self.defs: dict[str, A.Def] = {}
        self.lets: list[A.Let] = []        # top-level constants, in order
        self.uses_args = False
        self.files: list[str] = []


def resolve(prog: A.Program) -> Resolved:
    r = Resolved()
    r.files.append(prog.file)
    mains = [i for i in prog.items if isinstance(i, A.Main)]
    if not mains:
        raise SerqError("L001", "the program has no `fn main() { … }`", prog.span)
    if len(mains) > 1:
        raise SerqError("L002", "a second `fn main`: a program declares exactly one entry point", mains[1].span)
    main = mains[0]
    if main.name != "main":
        raise SerqError("L002", f"the entry point is `fn main()`, not `fn {main.name}()`", main.span)
    seen_main = False
    for item in prog.items:
        if isinstance(item, A.Main):
            seen_main = True
            continue
        if seen_main:
            raise SerqError("L003", "a declaration after `fn main`: only imports, definitions and constants "
                            "precede main, and nothing follows it", item.span)
        _top(item, r, prog.file, stack=[os.path.abspath(prog.file)])
    for item in main.items:
        if isinstance(item, A.Main):
            raise SerqError("L002", "a nested `fn`: a program declares exactly one entry point", item.span)
        if isinstance(item, A.Use):
            _use(item, r, prog.file, [os.path.abspath(prog.file)])
        elif isinstance(item, A.Def):
            _def(item, r)
    r.main = main
    return r


def _def(d: A.Def, r: Resolved):
    if d.name in r.defs:
        raise SerqError("L040", f"`{d.name}` is defined twice", d.span)
    r.defs[d.name] = d


def _top(item, r: Resolved, file: str, stack):
    if isinstance(item, A.Use):
        _use(item, r, file, stack)
    elif isinstance(item, A.Def):
        _def(item, r)
    elif isinstance(item, A.Let):
        if item.input is not None:
            raise SerqError("L011", "`args.number` declares an input only in a `let` inside main", item.span)
        r.lets.append(item)
    else:  # pragma: no cover - the grammar allows nothing else at top level
        raise SerqError("L003", "only imports, definitions and constants precede main", item.span)


def _use(u: A.Use, r: Resolved, file: str, stack):
    if u.path in STD:
        if u.path == "std/args":
            r.uses_args = True
        return
    if u.path.startswith("std/"):
        raise SerqError("L005", f"no standard library `{u.path}`: the standard library has std/args", u.span)
    path = os.path.normpath(os.path.join(os.path.dirname(file), u.path))
    key = os.path.abspath(path)
    if key in stack:
        raise SerqError("L006", f"`use \"{u.path}\"` imports itself through a cycle", u.span)
    if key in (os.path.abspath(f) for f in r.files):
        return  # imported already: a library's definitions are read once
    if not os.path.isfile(path):
        raise SerqError("L005", f"cannot find the library `{u.path}` (looked for {path})", u.span)
    lib = parse_file(path)
    r.files.append(path)
    for item in lib.items:
        if isinstance(item, A.Main):
            raise SerqError("L004", "a library has no entry point: `fn main` in a file that is `use`d", item.span)
        if isinstance(item, A.Let):
            raise SerqError("L004", "a library provides definitions and imports, not constants", item.span)
        _top(item, r, path, stack + [key])
