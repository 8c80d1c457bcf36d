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


class Row:
    """A trace row: its numbers, `arrival` on a session's first row under `arrive trace;` (else
    None), its session's name. Read as a mapping too (row["new"], row.get("stream", 0.0)), with
    the memory of a few numbers (a day of a public trace is millions of rows)."""
    __slots__ = ("turn", "new", "out", "think", "forced", "stream", "parent", "common", "arrival", "_session")

    def __init__(self, turn, new, out, think, forced, stream, parent, common):
        self.turn, self.new, self.out, self.think, self.forced = turn, new, out, think, forced
        self.stream, self.parent, self.common = stream, parent, common
        self.arrival = None
        self._session = None

    def __getitem__(self, k):
        return getattr(self, k)

    def get(self, k, default=None):
        return getattr(self, k, default)


_LAST: list = [None, None]  # the last trace read, by (path, arrivals, size, mtime): the linker's and the run's


def load_trace(path: str, arrivals: bool = False) -> list[list["Row"]]:
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


def _load(path: str, arrivals: bool) -> list[list["Row"]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:  # a spreadsheet's byte-order mark read past
            text = fh.read()
    except UnicodeDecodeError:
        raise _err(path, 1, 1, "the trace is not UTF-8 text") from None
    except OSError as exc:  # a missing file, a directory, a read that fails
        raise SerqError("T002", f"cannot read the trace: {exc.strerror or exc}", Span(path, 1, 1)) from None
    lines = text.splitlines()
    del text
    reader = csv.reader(lines)  # row by row: the file's rows are not all held twice
    head = next(reader, None)
    if head is None:
        raise _err(path, 1, 1, "the trace is empty: it needs a header")
    header = [h.strip() for h in head]
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
    width = len(header)
    # (field, column or None, default, whole, least): each row's numbers, read in this order
    fields = [(name, col.get(name), default, whole, lo) for name, default, whole, lo in (
        ("turn", None, True, 0.0), ("new", None, True, 0.0), ("out", None, True, 1.0), ("think", 0.0, False, 0.0),
        ("forced", 0.0, True, 0.0),
        # the prompt's content (docs/reference/content.md): its stream, whose first `common` tokens
        # are those of stream `parent`; 0 when the trace does not say
        ("stream", 0.0, True, 0.0), ("parent", 0.0, True, 0.0), ("common", 0.0, True, 0.0))]
    i_sess, i_arr = col["session"], col.get("arrival")
    sessions: list[list[dict]] = []
    seen: set = set()
    last_key = None
    cur: list = []
    first = prev = None  # the first session's arrival, the one before
    isinf, floor = math.isinf, math.floor

    def at(ln, i):  # the column a field starts at: worked out for an error only
        starts = _col_starts(lines[ln - 1])
        return starts[i] if i < len(starts) else 1

    def bad(ln, row, name, i, whole, lo, number=True):
        s = row[i].strip()
        if not number:
            return _err(path, ln, at(ln, i), f"`{name}` is {s!r}, not a number")
        kind = "a whole number" if whole else "a number"
        return _err(path, ln, at(ln, i), f"`{name}` is {s!r}: {kind} >= {lo:g} is needed")

    for ln, row in enumerate(reader, start=2):
        if not row or not "".join(row).strip():  # a blank line, or one of blank fields
            continue
        if len(row) != width:
            raise _err(path, ln, 1, f"{len(row)} field(s) where the header has {width}")
        vals = []
        for name, i, default, whole, lo in fields:
            if i is None:
                vals.append(default)
                continue
            try:
                v = float(row[i])  # float() itself allows the spaces around a number
            except ValueError:
                raise bad(ln, row, name, i, whole, lo, False) from None
            if v != v or isinf(v) or v < lo or (whole and v != floor(v)):
                raise bad(ln, row, name, i, whole, lo)
            vals.append(v)
        rec = Row(*vals)
        if rec.forced not in (0.0, 1.0):
            raise _err(path, ln, at(ln, col["forced"]), "`forced` is 0 or 1")
        sess = row[i_sess].strip()
        if sess != last_key:
            if sess in seen:
                raise _err(path, ln, at(ln, i_sess), f"the rows of session {sess!r} are not contiguous")
            seen.add(sess)
            cur = []
            sessions.append(cur)
            last_key = sess
            if arrivals:
                try:
                    t = float(row[i_arr])
                except ValueError:
                    raise bad(ln, row, "arrival", i_arr, False, 0.0, False) from None
                if t != t or isinf(t) or t < 0.0:
                    raise bad(ln, row, "arrival", i_arr, False, 0.0)
                if prev is not None and t < prev:
                    raise _err(path, ln, at(ln, i_arr), f"`arrival` is {row[i_arr].strip()}, before the session "
                               f"above's {prev:g}: sessions are in the order they arrive")
                first = t if first is None else first
                prev = t
                rec.arrival = t - first
        turn = rec.turn
        if turn != len(cur):
            raise _err(path, ln, at(ln, col["turn"]), f"session {sess!r}: turn {turn:g} where turn {len(cur)} "
                       "comes next (rows are ordered by turn, from 0)")
        rec._session = sess
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
