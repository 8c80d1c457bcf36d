"""Trace files (catalogue: *Trace files*): a CSV with a header; `session`, `turn`, `new`, `out`
required; `think`, `forced`, the content columns `stream`, `parent`, `common` and `arrival` optional
(`arrive trace;` requires `arrival`). A malformed file is an error naming file, line, column."""
from __future__ import annotations

import csv
import math
import os

from serq.diagnostics import SerqError, Span

REQUIRED = ("session", "turn", "new", "out")


def _err(path, line, col, msg):
    return SerqError("T001", msg, Span(path, line, col, line, col + 1))


_LAST: list = [None, None]  # the last trace read, by (path, arrivals, size, mtime): the linker's and the run's


def load_trace(path: str, arrivals: bool = False) -> list[list[dict]]:
    """The trace's sessions, in file order, each the list of its turns. With `arrivals` (`arrive
    trace;`), the `arrival` column is required and each session's first row holds its `arrival`,
    in seconds from the first session's, nondecreasing in file order."""
    try:
        st = os.stat(path)
        key = (os.path.abspath(path), arrivals, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and _LAST[0] == key:
        return _LAST[1]
    sessions = _load(path, arrivals)
    _LAST[:] = [key, sessions]
    return sessions


def _load(path: str, arrivals: bool) -> list[list[dict]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:  # a spreadsheet's byte-order mark read past
            text = fh.read()
    except UnicodeDecodeError:
        raise _err(path, 1, 1, "the trace is not UTF-8 text") from None
    except OSError as exc:  # a missing file, a directory, a read that fails
        raise SerqError("T002", f"cannot read the trace: {exc.strerror or exc}", Span(path, 1, 1)) from None
    lines = text.splitlines()
    rows = list(csv.reader(lines))
    if not rows:
        raise _err(path, 1, 1, "the trace is empty: it needs a header")
    header = [h.strip() for h in rows[0]]
    for i, h in enumerate(header):
        if h and header.index(h) < i:
            raise _err(path, 1, _col_starts(lines[0])[i], f"the header names `{h}` twice")
    for need in REQUIRED:
        if need not in header:
            raise _err(path, 1, 1, f"the header has no `{need}` column (required: {', '.join(REQUIRED)})")
    if arrivals and "arrival" not in header:
        raise _err(path, 1, 1, "the header has no `arrival` column: `arrive trace;` replays each session at its "
                   "arrival time (seconds), read from it")
    col = {h: i for i, h in enumerate(header)}
    sessions: list[list[dict]] = []
    seen: set = set()
    last_key = None
    first = prev = None  # the first session's arrival, the one before
    for ln, row in enumerate(rows[1:], start=2):
        if not row or all(not x.strip() for x in row):
            continue
        starts = _col_starts(lines[ln - 1])
        if len(row) != len(header):
            raise _err(path, ln, 1, f"{len(row)} field(s) where the header has {len(header)}")

        def num(name, default=None, whole=False, lo=0.0):
            if name not in col:
                return default
            i = col[name]
            s = row[i].strip()
            c = starts[i] if i < len(starts) else 1
            try:
                v = float(s)
            except ValueError:
                raise _err(path, ln, c, f"`{name}` is {s!r}, not a number") from None
            if v != v or math.isinf(v) or v < lo or (whole and v != math.floor(v)):
                kind = "a whole number" if whole else "a number"
                raise _err(path, ln, c, f"`{name}` is {s!r}: {kind} >= {lo:g} is needed")
            return v

        sess = row[col["session"]].strip()
        turn = num("turn", whole=True)
        rec = {"new": num("new", whole=True), "out": num("out", whole=True, lo=1.0), "think": num("think", 0.0),
               "forced": num("forced", 0.0, whole=True), "turn": turn,
               # the prompt's content (docs/reference/content.md): its stream, whose first `common`
               # tokens are those of stream `parent`; 0 when the trace does not say
               "stream": num("stream", 0.0, whole=True), "parent": num("parent", 0.0, whole=True),
               "common": num("common", 0.0, whole=True)}
        if rec["forced"] not in (0.0, 1.0):
            raise _err(path, ln, starts[col["forced"]], "`forced` is 0 or 1")
        if sess != last_key:
            if sess in seen:
                raise _err(path, ln, starts[col["session"]], f"the rows of session {sess!r} are not contiguous")
            seen.add(sess)
            sessions.append([])
            last_key = sess
            if arrivals:
                t = num("arrival")
                if prev is not None and t < prev:
                    raise _err(path, ln, starts[col["arrival"]], f"`arrival` is {row[col['arrival']].strip()}, "
                               f"before the session above's {prev:g}: sessions are in the order they arrive")
                first = t if first is None else first
                prev = t
                rec["arrival"] = t - first
        cur = sessions[-1]
        if turn != len(cur):
            raise _err(path, ln, starts[col["turn"]], f"session {sess!r}: turn {turn:g} where turn {len(cur)} "
                       "comes next (rows are ordered by turn, from 0)")
        rec["_session"] = sess
        cur.append(rec)
    if not sessions:
        raise _err(path, 1, 1, "the trace has no rows")
    return sessions


def _col_starts(line: str) -> list[int]:
    """The 1-based column where each field of a CSV line starts (quotes respected)."""
    starts, i, q = [1], 0, False
    while i < len(line):
        ch = line[i]
        if ch == '"':
            q = not q
        elif ch == "," and not q:
            starts.append(i + 2)
        i += 1
    return starts
