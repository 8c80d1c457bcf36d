"""A per-user cache of what start-up would otherwise build every time (the parser's tables, the IR's
validation schemas): one file per artifact, named by a hash of everything it is built from, so a
changed input never meets a stale file. Without a usable directory there is simply no cache."""
from __future__ import annotations

import hashlib
import os


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
