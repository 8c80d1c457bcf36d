"""Regular expressions compiled once per user, not once per command.

lark's contextual lexer builds a scanner for each parser state at its first use: one regular
expression, the alternation of the terminals that state accepts. A program's parse builds about 60
of them, and Python's sre compiler (pure Python) was half of the parse's CPU time. What that
compiler produces for a pattern is a list of integers whose meaning is fixed by Python's version;
`snapshot` takes it for the patterns the re module's cache holds, and `install` gives the C engine
those lists directly, putting the patterns into the re module's cache, where `re.compile` finds
them. The file is keyed on Python's version (serq/lang/parse.py); each pattern is checked against
the one `re.compile` makes (Pattern equality compares the compiled code) before it is kept, and
anything unexpected leaves the re module to compile as usual.
"""
from __future__ import annotations

import re


def snapshot(keys) -> list:
    """For each (type, pattern, flags) key of re's cache with a str pattern, the arguments of the
    C engine's compile that make it, as re's compiler computes them."""
    import _sre
    from re import _compiler, _parser
    out = []
    for kind, pattern, flags in keys:
        if kind is not str:
            continue
        p = _parser.parse(pattern, flags)
        code = [int(x) for x in _compiler._code(p, flags)]  # its opcodes are named ints
        groupindex = dict(p.state.groupdict)
        indexgroup = [None] * p.state.groups
        for name, i in groupindex.items():
            indexgroup[i] = name
        args = (pattern, flags | p.state.flags, code, p.state.groups - 1, groupindex, tuple(indexgroup))
        if _sre.compile(*args) == re.compile(pattern, flags):
            out.append((pattern, flags, args))
    return out


def install(snap: list) -> None:
    """Put the snapshot's patterns into re's cache (as many as it has room for)."""
    import _sre
    cache = re._cache
    room = re._MAXCACHE - len(cache) - 32  # left for the patterns compiled as usual
    for pattern, flags, args in snap[:max(0, room)]:
        key = (str, pattern, flags)
        if key not in cache:
            cache[key] = _sre.compile(*args)
