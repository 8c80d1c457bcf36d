"""`serq import FORMAT INPUT -o OUT.csv` (docs/import.md): a public LLM inference trace (Azure,
BurstGPT, Mooncake, ShareGPT) converted into a serQ trace (docs/reference/catalogue.md, *Trace
files*) with each session's `arrival`, which `arrive trace;` replays open-loop. Every malformed
input is a diagnostic (T001 naming file, line and column; T002 a file that cannot be read), every
bad option a usage error; the output is written whole or not at all (serq/_write.py)."""
from __future__ import annotations

import json
import math
import os
import re
import sys
from array import array
from datetime import date

from serq.diagnostics import SerqError, Span
from serq.lang.lower.inputs import UsageError

FORMATS = ("azure", "burstgpt", "mooncake", "sharegpt")
COLUMNS = ("session", "turn", "arrival", "new", "out", "think", "stream", "parent", "common")
# each CSV format's header as published, said when a file is not one
AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
MOONCAKE = ("timestamp", "input_length", "output_length", "hash_ids")
NAMES = {"azure": "Azure", "burstgpt": "BurstGPT", "mooncake": "Mooncake", "sharegpt": "ShareGPT"}
A = {"azure": "an Azure", "burstgpt": "a BurstGPT", "mooncake": "a Mooncake", "sharegpt": "a ShareGPT"}
SHAPES = {"azure": "a CSV with the header " + ",".join(AZURE),
          "burstgpt": "a CSV with the header " + ",".join(BURSTGPT),
          "mooncake": "JSON lines, each {" + ", ".join(f'"{k}"' for k in MOONCAKE) + "}",
          "sharegpt": 'a JSON list of conversations, each {"conversations": [{"from": ..., "value": ...}, ...]}'}
# which options belong to one format only: dest -> (option, format)
ONLY = {"only_model": ("--model", "burstgpt"), "block_size": ("--block-size", "mooncake"),
        "rate": ("--rate", "sharegpt"), "seed": ("--seed", "sharegpt"), "think": ("--think", "sharegpt"),
        "chars_per_token": ("--chars-per-token", "sharegpt")}
BLOCK = 512          # Mooncake's block: each hash id is one block of this many tokens
CHARS_PER_TOKEN = 4  # OpenAI's rule of thumb, in UTF-8 bytes (a character of English text is one)
# ShareGPT's speakers, as vLLM's converter (benchmarks/multi_turn/convert_sharegpt_to_openai.py) reads them
USER = {"human", "user"}
ASSISTANT = {"gpt", "bing", "chatgpt", "bard", "assistant", "model"}
SYSTEM = {"system"}


def arguments(sp) -> None:
    sp.add_argument("format", choices=FORMATS, metavar="FORMAT",
                    help="the trace's format: " + ", ".join(FORMATS))
    # cli.py reads args.file before it dispatches: the input is `file`
    sp.add_argument("file", metavar="INPUT", help="the trace file, as published")
    sp.add_argument("-o", "--output", metavar="OUT.csv", help="the serQ trace to write (required)")
    sp.add_argument("--start", metavar="S", help="keep the sessions arriving at S seconds or later after the "
                    "trace's first row (default 0)")
    sp.add_argument("--end", metavar="S", help="keep the sessions arriving before S seconds after the trace's "
                    "first row (default: all)")
    sp.add_argument("--limit", metavar="N", help="keep at most the first N sessions (after the window)")
    sp.add_argument("--scale", metavar="X", help="replay X times as fast: the arrival times divided by X "
                    "(default 1)")
    # not `--model`'s own dest: cli.py reads args.model as the sizing option
    sp.add_argument("--model", dest="only_model", metavar="NAME",
                    help="burstgpt: keep only this model's rows (e.g. ChatGPT, GPT-4)")
    sp.add_argument("--block-size", dest="block_size", metavar="B",
                    help=f"mooncake: the tokens of the block each hash id stands for (default {BLOCK})")
    sp.add_argument("--rate", metavar="R", help="sharegpt: sessions a second, exponential gaps (default inf: "
                    "all at time 0)")
    sp.add_argument("--seed", metavar="S", help="sharegpt: the seed of the gaps (default 0)")
    sp.add_argument("--think", metavar="T", help="sharegpt: seconds before each turn after the first (default 0)")
    sp.add_argument("--chars-per-token", dest="chars_per_token", metavar="X",
                    help=f"sharegpt: UTF-8 bytes a token, the estimate of a text's tokens (default {CHARS_PER_TOKEN})")


def command(args) -> int:
    fmt, src = args.format, args.file
    if not args.output:
        raise UsageError("serq import needs -o OUT.csv: the serQ trace to write")
    for dest, (opt, owner) in ONLY.items():
        if getattr(args, dest, None) is not None and fmt != owner:
            raise UsageError(f"{opt} applies to the {owner} format, not {fmt}")
    opts = _options(args)
    try:
        same = os.path.samefile(args.output, src)
    except OSError:  # either is missing or cannot be looked at: they are not one file
        same = False
    if same:
        raise UsageError(f"-o {args.output} is the input itself: name another file")
    tab, kept, notes = _convert(fmt, src, args.output, opts)
    _say(_summary(fmt, src, args.output, tab, kept, opts["scale"], notes))
    return 0


def _convert(fmt, src, out, opts):
    """Read, select and write: (the table, the kept rows, the notes)."""
    tab = READERS[fmt](src, opts)
    kept, notes = _select(tab, opts, src)
    content = None
    if fmt == "mooncake":  # shared prefixes of hash ids, among the kept rows only
        content = _prefixes([tab.new[i] for i in kept], [tab.key[i] for i in kept], opts["block_size"])
    elif fmt == "sharegpt":
        content = _streams([tab.key[i] for i in kept], opts["cpt"])
    from serq._write import write_text
    write_text(out, _output(tab, kept, content, opts["scale"]))  # OutputError: exit 1
    return tab, kept, notes


def converted(spec: str) -> str | None:
    """`serq run P --trace FORMAT:INPUT`: a public trace converted with the defaults of `serq import`
    into a serQ trace, its path: kept in serQ's cache (serq/_cache.py), named by the format, the
    input's bytes and this module's, so a trace is converted once; None when spec names no format
    (a serQ trace's path)."""
    fmt, colon, src = spec.partition(":")
    if not colon or fmt not in FORMATS:
        return None
    import argparse
    import hashlib
    from serq import _cache
    try:
        with open(src, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        with open(__file__, "rb") as fh:
            mine = hashlib.sha256(fh.read()).hexdigest()
    except OSError as exc:
        raise SerqError("T002", f"cannot read the trace: {exc.strerror or exc}", Span(src, 1, 1)) from None
    out = _cache.path("import", fmt, digest, mine)
    if out is not None and os.path.isfile(out):
        _cache.used(out)
        return out
    if out is None or not _cache.writable(out):
        import tempfile
        out = os.path.join(tempfile.mkdtemp(prefix="serq-import-"), os.path.basename(src) + ".csv")
    opts = _options(argparse.Namespace(start=None, end=None, limit=None, scale=None, only_model=None,
                                       block_size=None, rate=None, seed=None, think=None, chars_per_token=None))
    tab, kept, notes = _convert(fmt, src, out, opts)
    _say(_summary(fmt, src, "the run (kept in serQ's cache: converted once)", tab, kept, opts["scale"], notes))
    return out


def _say(text):
    if sys.stderr is not None:
        print(text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ options


def _float(text, opt, lo=None, above=None, finite=True):
    try:
        v = float(str(text).strip())
    except ValueError:
        raise UsageError(f"{opt}: {text!r} is not a number") from None
    if v != v or (finite and math.isinf(v)) or (lo is not None and v < lo) or (above is not None and not v > above):
        want = f"> {above:g}" if above is not None else f">= {lo:g}" if lo is not None else "a number"
        raise UsageError(f"{opt} is a {'finite ' if finite else ''}number {want}, not {text}")
    return v


def _whole(text, opt):
    t = str(text).strip()
    if not re.fullmatch(r"\d+", t) or int(t) < 1:
        raise UsageError(f"{opt} is a positive integer, not {text}")
    return int(t)


def _options(args) -> dict:
    o = {"start": 0.0, "end": math.inf, "limit": None, "scale": 1.0, "model": args.only_model,
         "block_size": BLOCK, "rate": math.inf, "seed": 0, "think": 0.0, "cpt": float(CHARS_PER_TOKEN)}
    if args.start is not None:
        o["start"] = _float(args.start, "--start", lo=0.0)
    if args.end is not None:
        o["end"] = _float(args.end, "--end", lo=0.0, finite=False)
    if not o["start"] < o["end"]:
        raise UsageError(f"--start {_num(o['start'])} is not before --end {_num(o['end'])}: the window is empty")
    if args.limit is not None:
        o["limit"] = _whole(args.limit, "--limit")
    if args.scale is not None:
        o["scale"] = _float(args.scale, "--scale", above=0.0)
    if args.block_size is not None:
        o["block_size"] = _whole(args.block_size, "--block-size")
    if args.rate is not None:
        o["rate"] = _float(args.rate, "--rate", above=0.0, finite=False)
    if args.seed is not None:
        from serq.cli import seed_value
        o["seed"] = seed_value(args.seed)
    if args.think is not None:
        o["think"] = _float(args.think, "--think", lo=0.0)
    if args.chars_per_token is not None:
        o["cpt"] = _float(args.chars_per_token, "--chars-per-token", above=0.0)
    if o["model"] is not None and not o["model"].strip():
        raise UsageError("--model names a model (e.g. ChatGPT, GPT-4)")
    return o


# ------------------------------------------------------------------ what a reader gives


class Table:
    """The sessions a reader kept, in file order: each one's time (seconds, any origin) and
    tokens. Single-turn traces keep their numbers in arrays (the week-long Azure traces have tens
    of millions of rows); ShareGPT's sessions have `turns`, each [(new, out, think), ...]; `key` is
    what a session's content is (a Mooncake row's hash ids, a ShareGPT conversation's system text)."""

    def __init__(self, fmt, path):
        self.fmt, self.path = fmt, path
        self.t = array("d")
        self.new = array("q")
        self.out = array("q")
        self.turns: list | None = None
        self.key: list | None = None
        self.first = math.inf             # the trace's first time, whatever its row became
        self.skipped: dict[str, int] = {}  # why -> rows (sessions) left out
        self.cut = 0                       # ShareGPT: conversations ended before their last message
        self.models: dict[str, int] = {}   # BurstGPT: the rows of each model

    def skip(self, why, n=1):
        self.skipped[why] = self.skipped.get(why, 0) + n

    def row(self, t, new, out):
        """A single-turn row kept; one of 0 output tokens skipped (a serQ turn has one at least)."""
        if out == 0:
            self.skip("rows with 0 output tokens")
            return
        self.t.append(t)
        self.new.append(new)
        self.out.append(out)

    def __len__(self):
        return len(self.t)


def _err(path, line, col, msg, notes=()):
    return SerqError("T001", msg, Span(path, line, max(1, col), line, max(1, col) + 1), tuple(notes))


def _unreadable(path, exc):
    return SerqError("T002", f"cannot read the trace: {exc.strerror or exc}", Span(path, 1, 1))


def _open(path):
    try:
        return open(path, "rb")
    except OSError as exc:  # missing, a directory, no permission
        raise _unreadable(path, exc) from None


def _head(path) -> str:
    """The file's first bytes as text, for the note that says which format it looks like."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4096).decode("utf-8-sig", "replace")
    except OSError:
        return ""


COMPRESSED = (".gz", ".zip", ".rar", ".bz2", ".xz", ".zst", ".7z", ".tar")


def _not_text(path, line, fmt):
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError:
        magic = b""
    hint = (["the file looks compressed: decompress it first"]
            if path.lower().endswith(COMPRESSED) or magic in (b"\x1f\x8b", b"PK") else [])
    return _err(path, line, 1, f"the file is not UTF-8 text: {A[fmt]} trace is {SHAPES[fmt]}", hint)


def _text(path, fmt) -> str:
    """The whole file as text (the JSON formats: a record may span lines)."""
    with _open(path) as fh:
        try:
            data = fh.read()
        except OSError as exc:
            raise _unreadable(path, exc) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _not_text(path, data.count(b"\n", 0, exc.start) + 1, fmt) from None


def _lines(path, fmt):
    """The file's lines, (number, text without its line end), read as they come: a CSV trace may
    be larger than memory would hold twice."""
    with _open(path) as fh:
        ln = 0
        try:
            for raw in fh:
                ln += 1
                try:
                    line = raw.decode("utf-8-sig" if ln == 1 else "utf-8")
                except UnicodeDecodeError:
                    raise _not_text(path, ln, fmt) from None
                yield ln, line.rstrip("\r\n")
        except OSError as exc:
            raise _unreadable(path, exc) from None


def _looks_like(text: str) -> str | None:
    """Which of the formats the file's beginning is, for the note of an error."""
    head = text.lstrip()[:4096]
    if head.startswith("["):
        return "sharegpt"
    if head.startswith("{"):
        if '"conversations"' in head or '"messages"' in head:
            return "sharegpt"
        if '"input_length"' in head or '"hash_ids"' in head:
            return "mooncake"
        return None
    first = head.split("\n", 1)[0].lower()
    if "contexttokens" in first:
        return "azure"
    if "request tokens" in first:
        return "burstgpt"
    return None


def _other(path, fmt) -> list[str]:
    other = _looks_like(_head(path))
    if other and other != fmt:
        return [f"it looks like {A[other]} trace: serq import {other} {path} ..."]
    return []


def _empty(path, fmt):
    return _err(path, 1, 1, f"the file is empty: {A[fmt]} trace is {SHAPES[fmt]}")


def _col(line: str, i: int) -> int:
    """The 1-based column where field i of a CSV line starts (quotes respected)."""
    starts, q = [1], False
    for k, ch in enumerate(line):
        if ch == '"':
            q = not q
        elif ch == "," and not q:
            starts.append(k + 2)
    return starts[i] if i < len(starts) else 1


def _fields(line: str) -> list[str]:
    if '"' not in line:
        return line.split(",")
    import csv
    return next(csv.reader([line]), [])


_WHOLE = re.compile(r"\s*\+?(\d+)(?:\.0*)?\s*")


def _count(s: str):
    """A token count as written: a whole number >= 0 (`12`, or `12.0` as a table tool writes it),
    else None."""
    m = _WHOLE.fullmatch(s)
    return int(m.group(1)) if m else None


def _bad_count(path, ln, line, i, name, s):
    what = "negative" if s.strip().startswith("-") else "not a whole number"
    return _err(path, ln, _col(line, i), f"`{name}` is {s.strip()!r}: {what}; a token count is a whole number >= 0")


# ------------------------------------------------------------------ CSV formats


def _csv(path, fmt, need):
    """The header's columns (index by lower-case name), its width and the rows' lines after it; a
    missing column is an error that names the format's header."""
    lines = _lines(path, fmt)
    first = next(((ln, x) for ln, x in lines if x.strip()), None)
    if first is None:
        raise _empty(path, fmt)
    ln, text = first
    header = [h.strip().lower() for h in _fields(text)]
    col: dict[str, int] = {}
    for i, h in enumerate(header):
        col.setdefault(h, i)
    for name in need:
        if name.lower() not in col:
            shape = ",".join(AZURE if fmt == "azure" else BURSTGPT)
            raise _err(path, ln, 1, f"the header has no `{name}` column: {A[fmt]} trace's header is {shape}",
                       _other(path, fmt))
    return col, len(header), lines


def _row(path, ln, line, width):
    f = _fields(line)
    if len(f) != width:
        raise _err(path, ln, 1, f"{len(f)} field(s) where the header has {width}")
    return f


# TIMESTAMP: `2023-11-16 18:15:46.6805900` (2023: seven fractional digits, no zone) or
# `2024-05-12 00:00:00.001163+00:00` / `2024-05-12 00:00:00+00:00` (2024: a zone, the fraction
# left out when zero); read to the nanosecond (digits beyond dropped), a zone taken to UTC
_STAMP = re.compile(r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9})\d*)?"
                    r"\s*(?:(Z|UTC)|([+-])(\d{2}):?(\d{2}))?\s*", re.IGNORECASE)


def _stamp(s: str, days: dict) -> int | None:
    """A TIMESTAMP in nanoseconds since 1970-01-01 UTC, or None when it is not one."""
    m = _STAMP.fullmatch(s)
    if m is None:
        return None
    y, mo, d, h, mi, sec, frac, _utc, sign, oh, om = m.groups()
    day = days.get((y, mo, d))
    if day is None:  # a date is checked once (a trace has a few)
        try:
            day = date(int(y), int(mo), int(d)).toordinal() - 719163  # 719163: 1970-01-01's
        except ValueError:
            return None
        days[(y, mo, d)] = day
    h, mi, sec = int(h), int(mi), int(sec)
    if h > 23 or mi > 59 or sec > 60:
        return None
    secs = day * 86400 + h * 3600 + mi * 60 + sec
    if sign:
        off = int(oh) * 3600 + int(om) * 60
        secs += -off if sign == "+" else off
    return secs * 1_000_000_000 + (int(frac.ljust(9, "0")) if frac else 0)


def read_azure(path, opts) -> Table:
    col, width, lines = _csv(path, "azure", AZURE)
    tab = Table("azure", path)
    it, ic, ig = col["timestamp"], col["contexttokens"], col["generatedtokens"]
    days: dict = {}
    base, first, rows = None, math.inf, 0
    for ln, line in lines:
        if not line.strip():
            continue
        f = _row(path, ln, line, width)
        rows += 1
        ns = _stamp(f[it], days)
        if ns is None:
            raise _err(path, ln, _col(line, it), f"`TIMESTAMP` is {f[it].strip()!r}, not a date and time like "
                       "2023-11-16 18:15:46.6805900 or 2024-05-12 00:00:00.001163+00:00")
        if base is None:
            base = ns
        t = (ns - base) / 1e9  # the difference taken in integers: exact to the nanosecond over weeks
        new, out = _counts(path, ln, line, f, (ic, "ContextTokens"), (ig, "GeneratedTokens"))
        if t < first:
            first = t
        tab.row(t, new, out)
    if not rows:
        raise _err(path, 1, 1, "the trace has a header and no rows")
    tab.first = first
    return tab


def _counts(path, ln, line, f, new, out) -> tuple:
    """A CSV row's prompt and output tokens, each (column, name): whole numbers >= 0, or its T001."""
    vals = []
    for i, name in (new, out):
        v = _count(f[i])
        if v is None:
            raise _bad_count(path, ln, line, i, name, f[i])
        vals.append(v)
    return tuple(vals)


def read_burstgpt(path, opts) -> Table:
    want = opts["model"]
    need = ("Timestamp", "Request tokens", "Response tokens") + (("Model",) if want is not None else ())
    col, width, lines = _csv(path, "burstgpt", need)
    tab = Table("burstgpt", path)
    it, iq, ir = col["timestamp"], col["request tokens"], col["response tokens"]
    im = col.get("model")
    key = want.strip().lower() if want is not None else None
    first, rows = math.inf, 0
    for ln, line in lines:
        if not line.strip():
            continue
        f = _row(path, ln, line, width)
        rows += 1
        try:
            t = float(f[it])
        except ValueError:
            t = math.nan
        if not math.isfinite(t):
            raise _err(path, ln, _col(line, it), f"`Timestamp` is {f[it].strip()!r}, not a time in seconds from "
                       "the trace's start")
        new, out = _counts(path, ln, line, f, (iq, "Request tokens"), (ir, "Response tokens"))
        if t < first:
            first = t
        if im is not None:
            m = f[im].strip()
            tab.models[m] = tab.models.get(m, 0) + 1
            if key is not None and m.lower() != key:
                tab.skip("rows of other models")
                continue
        tab.row(t, new, out)  # 0 output tokens: a failed request (BurstGPT's README), nothing to replay
    if not rows:
        raise _err(path, 1, 1, "the trace has a header and no rows")
    if key is not None and not any(m.lower() == key for m in tab.models):
        seen = ", ".join(f"{m} ({n:,} rows)" for m, n in sorted(tab.models.items(), key=lambda kv: -kv[1]))
        raise UsageError(f"--model {want}: no row of that model in {path}; its models: {seen}")
    tab.first = first
    return tab


# ------------------------------------------------------------------ Mooncake


_WS = re.compile(r"[ \t\n\r]*")


def _msg(exc) -> str:
    """json's message without its dangling ` at` (the place is the diagnostic's)."""
    return exc.msg.removesuffix(" at")


def _json_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _where(text, pos):
    """(line, column) of an offset, both from 1."""
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def read_mooncake(path, opts) -> Table:
    """JSON lines, as published; a file of the records pretty-printed one after another (as
    Mooncake's README shows two) reads the same, each record's place its first character's."""
    text = _text(path, "mooncake")
    if not text.strip():
        raise _empty(path, "mooncake")
    tab = Table("mooncake", path)
    tab.key = []
    dec = json.JSONDecoder()
    n, line, last, first = len(text), 1, 0, math.inf
    i = _WS.match(text, 0).end()
    while i < n:
        line += text.count("\n", last, i)  # the lines so far, counted as the records pass
        last = i
        col = i - text.rfind("\n", 0, i)
        try:
            rec, j = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            notes = _other(path, "mooncake") if not tab.key else []
            if exc.lineno != line:
                notes = [f"the record begins on line {line}"] + notes
            raise _err(path, exc.lineno, exc.colno, f"not a JSON record: {_msg(exc)} (a Mooncake trace is "
                       f"{SHAPES['mooncake']})", notes) from None
        if not isinstance(rec, dict):
            kind = {list: "a list", str: "a string"}.get(type(rec), "a value")
            raise _err(path, line, col, f"{kind} where a Mooncake record is an object {{{', '.join(MOONCAKE)}}}",
                       _other(path, "mooncake"))

        def at(key, i=i, j=j, line=line):
            k = text.find(f'"{key}"', i, j)
            if k < 0:
                return line, col
            return line + text.count("\n", i, k), k - text.rfind("\n", 0, k)

        for key in MOONCAKE[:3]:
            if key not in rec:
                raise _err(path, line, col, f"the record has no `{key}`: a Mooncake record is "
                           f"{{{', '.join(MOONCAKE)}}}", _other(path, "mooncake"))
        ts = rec["timestamp"]
        if not _json_number(ts) or not math.isfinite(ts):
            raise _err(path, *at("timestamp"), f"`timestamp` is {json.dumps(ts)}, not a time in milliseconds")
        counts = []
        for key in ("input_length", "output_length"):
            v = rec[key]
            if not _json_number(v) or not math.isfinite(v) or v < 0 or v != int(v):
                what = "negative" if _json_number(v) and v < 0 else "not a whole number"
                raise _err(path, *at(key), f"`{key}` is {json.dumps(v)}: {what}; a token count is a whole "
                           "number >= 0")
            counts.append(int(v))
        ids = rec.get("hash_ids", [])  # a record without them shares nothing
        if not isinstance(ids, list) or not all(isinstance(h, (int, str)) and not isinstance(h, bool) for h in ids):
            raise _err(path, *at("hash_ids"), "`hash_ids` is not a list of block ids")
        t = ts / 1000.0
        if t < first:
            first = t
        if counts[1] == 0:  # a serQ turn has an output token at least
            tab.skip("rows with 0 output tokens")
        else:
            tab.t.append(t)
            tab.new.append(counts[0])
            tab.out.append(counts[1])
            tab.key.append(ids)
        i = _WS.match(text, j).end()
    tab.first = first
    return tab


def _prefixes(lengths, keys, block):
    """Mooncake's shared prefixes as content streams: the kept row k (1-based, in arrival order)
    is stream k, the child of an EARLIER kept row with the longest common prefix of hash ids. A
    trie over the rows' hash-id sequences, each row walked once (O(total hash ids)): a node
    remembers the first row that reached it, and a later row takes its place once if that row's
    prompt ends inside the node's last block and the later one's fills it (so that a short prompt
    does not cut `common`). Any row through the node gives the same tokens (the chained hash,
    docs/reference/content.md), so the choice changes nothing else. common = the prefix's blocks
    times the block, at most the row's prompt and the parent's. Returns (parents, commons)."""
    edges: dict = {}   # (node, hash id) -> node; node 0 is the root
    owner = [0]        # node -> the row it makes the parent
    full = [True]      # node -> whether that row's prompt fills the node's blocks
    parents, commons = [], []
    for k, (length, ids) in enumerate(zip(lengths, keys), start=1):
        node, parent, depth = 0, 0, 0
        for j, h in enumerate(ids):
            fills = length >= (j + 1) * block
            nxt = edges.get((node, h))
            if nxt is None:
                nxt = len(owner)
                edges[(node, h)] = nxt
                owner.append(k)
                full.append(fills)
            else:
                parent, depth = owner[nxt], j + 1  # read before this row may take the node
                if not full[nxt] and fills:
                    owner[nxt], full[nxt] = k, True
            node = nxt
        common = min(depth * block, length, lengths[parent - 1]) if parent else 0
        parents.append(parent if common > 0 else 0)
        commons.append(common)
    return parents, commons


# ------------------------------------------------------------------ ShareGPT


def _records(path, text):
    """The top-level list's elements, each with its offset in the text (a diagnostic's place),
    read one by one: json's own reader keeps no positions."""
    dec = json.JSONDecoder()
    n = len(text)

    def ws(i):
        return _WS.match(text, i).end()

    def fail(pos, msg, notes=()):
        return _err(path, *_where(text, pos), msg, notes)

    i = ws(0)
    if text[i] != "[":
        try:
            dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise _err(path, exc.lineno, exc.colno, f"not JSON: {_msg(exc)} (a ShareGPT file is {SHAPES['sharegpt']})",
                       _other(path, "sharegpt")) from None
        raise fail(i, f"not a list: a ShareGPT file is {SHAPES['sharegpt']}", _other(path, "sharegpt"))
    out = []
    i = ws(i + 1)
    if i < n and text[i] == "]":
        i = ws(i + 1)
    else:
        while True:
            try:
                obj, j = dec.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                raise _err(path, exc.lineno, exc.colno, f"not JSON: {_msg(exc)}") from None
            out.append((i, obj))
            i = ws(j)
            if i < n and text[i] == ",":
                i = ws(i + 1)
                continue
            if i < n and text[i] == "]":
                i = ws(i + 1)
                break
            raise fail(min(i, n - 1), "not JSON: a ',' or ']' is expected after a conversation")
    if i < n:
        raise fail(i, "not JSON: more after the list of conversations")
    return out


def _tokens(text: str, cpt: float) -> int:
    """A text's tokens, estimated (no tokenizer here): its UTF-8 bytes over `cpt` (4, OpenAI's rule
    of thumb), rounded up."""
    return math.ceil(len(text.encode("utf-8")) / cpt)


def read_sharegpt(path, opts) -> Table:
    text = _text(path, "sharegpt")
    if not text.strip():
        raise _empty(path, "sharegpt")
    tab = Table("sharegpt", path)
    tab.turns, tab.key = [], []
    cpt, think, rate = opts["cpt"], opts["think"], opts["rate"]
    import random
    rng = random.Random(opts["seed"])
    t = 0.0
    records = _records(path, text)
    if not records:
        raise _err(path, 1, 1, "the list of conversations is empty")
    for n, (pos, rec) in enumerate(records, start=1):
        def bad(msg, notes=(), pos=pos):
            return _err(path, *_where(text, pos), msg, notes)

        name = rec.get("id") if isinstance(rec, dict) else None
        where = f"conversation {n}" + (f" (id {name})" if isinstance(name, (str, int)) else "")
        if not isinstance(rec, dict) or not ("conversations" in rec or "messages" in rec):
            raise bad(f"{where} has no `conversations`: a ShareGPT file is {SHAPES['sharegpt']}",
                      _other(path, "sharegpt"))
        msgs = rec["conversations"] if "conversations" in rec else rec["messages"]
        if not isinstance(msgs, list):
            raise bad(f"{where}: `conversations` is not a list of messages")
        said = []
        for m, msg in enumerate(msgs, start=1):
            if not isinstance(msg, dict):
                raise bad(f"{where}: message {m} is not an object {{\"from\": ..., \"value\": ...}}")
            who = msg.get("from", msg.get("role"))  # ShareGPT's keys, or OpenAI's (role, content)
            what = msg.get("value", msg.get("content"))
            if not isinstance(who, str):
                raise bad(f"{where}: message {m} has no `from` (human, gpt, system, ...)")
            if not isinstance(what, str):
                raise bad(f"{where}: message {m}'s `value` is not text")
            w = who.strip().lower()
            role = "user" if w in USER else "assistant" if w in ASSISTANT else "system" if w in SYSTEM else None
            if role is None:
                raise bad(f"{where}: message {m} is from {who!r}; a message is from human or user, from gpt, "
                          "chatgpt, bard, bing or assistant, or from system")
            said.append((role, what))
        turns, system, cut = _turns(said, cpt, think)
        if not turns:
            tab.skip("conversations with no complete turn")
            continue
        tab.cut += cut
        if tab.turns and math.isfinite(rate):
            t += rng.expovariate(rate)  # vLLM's client at --request-rate R: Poisson arrivals, the first at 0
        tab.first = min(tab.first, t)
        tab.t.append(t)
        tab.turns.append(turns)
        tab.key.append(system)
    return tab


def _turns(said, cpt, think):
    """A conversation's turns: a human message and the reply right after it, the system messages
    before a human message part of its prompt. Replies before the first human message (a
    conversation continued from an earlier part; vLLM's converter skips them too) are left out;
    a human message without a reply, or a reply without a human message, ends the session.
    Returns the turns, the system text before the first turn, and whether messages were left."""
    i, n = 0, len(said)
    while i < n and said[i][0] == "assistant":
        i += 1
    turns, pending, system = [], 0, ""
    while i < n:
        role, what = said[i]
        if role == "system":
            pending += _tokens(what, cpt)
            if not turns:
                system += what
            i += 1
            continue
        if role != "user" or i + 1 >= n or said[i + 1][0] != "assistant":
            break
        new = pending + _tokens(what, cpt)
        out = max(1, _tokens(said[i + 1][1], cpt))  # a serQ turn has an output token at least
        turns.append((new, out, think if turns else 0.0))
        pending = 0
        i += 2
    return turns, (system if turns else ""), bool(turns) and i < n


def _streams(keys, cpt):
    """ShareGPT's content: a session's turns all name one stream, its session number (each turn's
    prompt extends the last). A session that begins with a system prompt is that prompt's child at
    its estimated tokens; the prompt is a stream of its own, numbered after the sessions, one for
    each distinct text (docs/reference/content.md, *Traces*). Returns (parents, commons)."""
    n, seen = len(keys), {}
    parents, commons = [], []
    for text in keys:
        if text:
            parents.append(seen.setdefault(text, n + len(seen) + 1))
            commons.append(_tokens(text, cpt))
        else:
            parents.append(0)
            commons.append(0)
    return parents, commons


# ------------------------------------------------------------------ selection and output


READERS = {"azure": read_azure, "burstgpt": read_burstgpt, "mooncake": read_mooncake, "sharegpt": read_sharegpt}


def _select(tab: Table, opts, path):
    """The kept sessions' indices in the order they arrive (a stable sort by time: the Azure traces
    are not quite sorted), those in the window [start, end) counted from the trace's first row,
    then the first --limit of them; and what was left out, in words."""
    notes = []
    n = len(tab)
    if n == 0:
        why = ", ".join(_plural(v, k) for k, v in tab.skipped.items()) or "no rows"
        raise _err(path, 1, 1, f"nothing to replay: every row was left out ({why})")
    ts = tab.t
    order = range(n)
    if any(ts[i] > ts[i + 1] for i in range(n - 1)):
        order = sorted(order, key=ts.__getitem__)
        notes.append("rows sorted by time")
    if opts["start"] > 0 or math.isfinite(opts["end"]):
        lo, hi = tab.first + opts["start"], tab.first + opts["end"]
        kept = array("q", (i for i in order if lo <= ts[i] < hi))
        if not kept:
            raise UsageError(f"no session arrives in the window [{_num(opts['start'])}, {_num(opts['end'])}) s: "
                             f"the trace's sessions arrive from {_num(min(ts) - tab.first)} to "
                             f"{_num(max(ts) - tab.first)} s after its first row")
        if len(kept) < n:
            notes.append(f"{_plural(n - len(kept), 'sessions')} outside the window")
    else:
        kept = order
    if opts["limit"] is not None and len(kept) > opts["limit"]:
        notes.append(f"{_plural(len(kept) - opts['limit'], 'sessions')} past --limit")
        kept = kept[:opts["limit"]]
    return kept, notes


def _time(v: float) -> str:
    """Seconds to the microsecond, without trailing zeros: 0, 0.25, 12.000913."""
    s = f"{v:.6f}".rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


def _output(tab: Table, kept, content, scale):
    """The serQ trace's text, in chunks (a week-long trace is a large file)."""
    ts, t0 = tab.t, tab.t[kept[0]]
    parents, commons = content if content else (None, None)
    yield ",".join(COLUMNS) + "\n"
    chunk = []
    for s, i in enumerate(kept, start=1):
        arrival = _time((ts[i] - t0) / scale)
        if tab.turns is None:  # one turn
            p, c = (parents[s - 1], commons[s - 1]) if parents else (0, 0)
            chunk.append(f"{s},0,{arrival},{tab.new[i]},{tab.out[i]},0,{s if parents else 0},{p},{c}\n")
        else:
            p, c = parents[s - 1], commons[s - 1]
            for k, (new, out, think) in enumerate(tab.turns[i]):
                chunk.append(f"{s},{k},{arrival if k == 0 else ''},{new},{out},{_time(think)},{s},{p},{c}\n")
        if len(chunk) >= 10000:
            yield "".join(chunk)
            chunk = []
    yield "".join(chunk)


def _num(v: float) -> str:
    if math.isinf(v):
        return "inf"
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"


SINGULAR = {"sessions": "session", "turns": "turn", "rows": "row", "conversations": "conversation"}


def _plural(n, words):
    if n == 1:
        head, _, rest = words.partition(" ")
        words = " ".join(x for x in (SINGULAR.get(head, head), rest) if x)
    return f"{n:,} {words}"


def _summary(fmt, src, dst, tab, kept, scale, notes) -> str:
    n = len(kept)
    turns = n if tab.turns is None else sum(len(tab.turns[i]) for i in kept)
    span = (tab.t[kept[-1]] - tab.t[kept[0]]) / scale
    when = f"over {_num(span)} s ({_num(n / span)} sessions/s)" if span > 0 else "all at time 0"
    parts = [f"serq import: {_plural(n, 'sessions')} ({_plural(turns, 'turns')}) from {fmt} trace {src} {when} "
             f"-> {dst}"]
    if tab.skipped:
        parts.append("skipped " + ", ".join(_plural(v, k) for k, v in tab.skipped.items()))
    if tab.cut:
        parts.append(f"{_plural(tab.cut, 'conversations')} ended at a message without its pair")
    left = [x for x in notes if x != "rows sorted by time"]
    if left:
        parts.append("left out " + ", ".join(left))
    if "rows sorted by time" in notes:
        parts.append("rows sorted by time")
    if scale != 1:
        parts.append(f"arrivals divided by {_num(scale)} (--scale)")
    return "; ".join(parts)
