"""Writing a file whole or not at all: the text goes to a temporary file beside the destination,
is written to the last byte, flushed and synced, then renamed over it (os.replace, atomic on one
file system). A failure removes the temporary file and raises OutputError, naming the file and the
system's reason, which every command turns into exit 1 (docs/reference/cli.md: an I/O error); the
destination is never left half-written: it is the old file or the new one.

Every byte goes through `write_all`, which loops over os.write until the system has taken all of it
or refused (ENOSPC, EFBIG under `ulimit -f`, EPIPE): Python's own buffered files return a short
count from a large write that the disk took only part of, and a text file ignores it, so a truncated
file could end in exit 0 (issue 50, items 3 and 4). `WholeWriter` is the same for a stream (the
command line's stdout, serq/cli.py)."""
from __future__ import annotations

import io
import os
import stat
import tempfile


class OutputError(Exception):
    """An output that could not be written (serq.cli: exit 1)."""


CHUNK = 1 << 16  # bytes gathered before each write: a large text is written in pieces, never held twice


def write_all(fd: int, data) -> int:
    """All of `data` written to the file descriptor `fd`, or an OSError: a short write is followed by
    another of the rest, which says why the system stopped (a full disk, a file size limit)."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        try:
            n = os.write(fd, view[done:])
        except BlockingIOError:  # a non-blocking pipe that is full: wait until it takes more
            import select
            select.select([], [fd], [])
            continue
        if n <= 0:  # a write that takes nothing and says no error: the device is full
            raise OSError(28, os.strerror(28))
        done += n
    return done


class WholeWriter(io.RawIOBase):
    """A raw stream over a file descriptor (not closed with it) whose every write is whole or
    raises, so that a buffered or text stream over it never loses a short write's rest."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, b) -> int:
        return write_all(self.fd, b)


def write_text(path, text, encoding: str = "utf-8") -> None:
    """Write `text` (a string, or an iterable of strings written one after another, for an output
    too large to hold twice) to `path`, whole or not at all; OutputError says why not."""
    _write(path, text, encoding)


def write_bytes(path, data: bytes) -> None:
    """write_text of bytes (a PNG), or of an iterable of bytes."""
    _write(path, data, None)


def replace(path, text, encoding: str | None = "utf-8") -> None:
    """write_text's work, its failure an OSError (the caller words it: serq/staged.py's files, written
    into a staging directory, are reported by the destination's name, not the staging one's)."""
    from serq.staged import RaisingSignals  # (which imports this module)
    with RaisingSignals():  # SIGTERM while writing: raised, so that the temporary file is removed
        _replace(os.fspath(path), text, encoding)


def _replace(path, text, encoding) -> None:
    # the same directory as the destination: a rename across file systems would be a copy
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        try:
            _fill(fd, text, encoding)
            os.fsync(fd)
        finally:
            os.close(fd)
        # mkstemp makes the file private (0600); give it the mode the destination has, or a new
        # file would have
        os.chmod(tmp, _mode(path))
        os.replace(tmp, path)
    except BaseException:  # an error, or a signal raised as an exception (serq/staged.py): no temp file left
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_dir(folder)


def _write(path, text, encoding) -> None:
    path = os.fspath(path)
    try:
        replace(path, text, encoding)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _fill(fd: int, text, encoding) -> None:
    """The text's bytes (one string, or the chunks of an iterable) to fd, CHUNK bytes at a time."""
    pieces = (text,) if isinstance(text, (str, bytes, bytearray)) else text
    pending: list[bytes] = []
    size = 0
    for piece in pieces:
        data = piece.encode(encoding) if isinstance(piece, str) else bytes(piece)
        pending.append(data)
        size += len(data)
        if size >= CHUNK:
            write_all(fd, b"".join(pending))
            pending, size = [], 0
    if pending:
        write_all(fd, b"".join(pending))


def _mode(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)  # read the umask: setting it is the only way
        os.umask(mask)
        return 0o666 & ~mask


def _sync_dir(folder: str) -> None:
    """The rename itself made durable, where the system allows a directory to be synced."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
