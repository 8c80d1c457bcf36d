"""A per-user cache of what start-up would otherwise build every time (the parser's tables, the IR's
validation schemas): one file per artifact, named by a hash of everything it is built from, so a
changed input never meets a stale file. Without a usable directory there is simply no cache.

A file read is marked used (its modification time, at most once a day); writing one removes the
files of its kind not used for KEEP_DAYS, which other versions of serQ (another checkout, an
upgrade) left, and a temporary file a crash left a day ago. Several versions in use at once keep
theirs."""
from __future__ import annotations

import hashlib
import os
import time

KEEP_DAYS = 30
DAY = 86400.0


def path(kind: str, *parts: str) -> str | None:
    """The cache file for `kind` built from `parts` ($XDG_CACHE_HOME or ~/.cache, then serq), or
    None when no cache directory can be named."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative: the XDG spec's default
        base = os.path.join(os.path.expanduser("~"), ".cache")
        if not os.path.isabs(base):  # no home to expand
            return None
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return os.path.join(base, "serq", f"{kind}-{h.hexdigest()[:32]}.pickle")


def read(file: str | None, load):
    """load(fh) of the cache file, which is then marked used; None when there is no file name, or
    the file is absent, unreadable or damaged (load raised): the caller builds it again and saves
    it, which mends the cache."""
    if file is None:
        return None
    try:
        with open(file, "rb") as fh:
            value = load(fh)
    except Exception:
        return None
    used(file)
    return value


def writable(file: str) -> bool:
    """Whether `file` could be saved: its directory made (private to the user) and writable."""
    d = os.path.dirname(file)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK)


def save(file: str, write) -> None:
    """write(fh) into a temporary file beside `file`, renamed onto it, so a reader sees the whole
    file or none; a directory that cannot be written (a read-only home) only means no cache."""
    import tempfile
    try:
        d = os.path.dirname(file)
        os.makedirs(d, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, file)
    except Exception:  # a full disk, or an artifact that cannot be written: no cache this time
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return
    prune(file)


def used(file: str) -> None:
    """A cache file was read: it is kept KEEP_DAYS more (its mtime, touched at most once a day)."""
    try:
        if os.stat(file).st_mtime < time.time() - DAY:
            os.utime(file)
    except OSError:
        pass


def prune(file: str) -> None:
    """Remove the files of `file`'s kind unused for KEEP_DAYS, and temporary files a day old."""
    d, name = os.path.split(file)
    kind = name.rsplit("-", 1)[0] + "-"
    now = time.time()
    try:
        entries = list(os.scandir(d))
    except OSError:
        return
    for e in entries:
        old = (e.name.startswith(kind) and e.name.endswith(".pickle") and e.name != name and
               _mtime(e) < now - KEEP_DAYS * DAY) or (e.name.startswith(".tmp-") and _mtime(e) < now - DAY)
        if old:
            try:
                os.unlink(e.path)
            except OSError:  # another process took it first, or it is not ours to remove
                pass


def _mtime(entry) -> float:
    try:
        return entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return float("inf")  # gone or unreadable: not removed
