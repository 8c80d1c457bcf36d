"""Writing a file whole or not at all: the text goes to a temporary file beside the destination,
is flushed and synced, then renamed over it (os.replace, atomic on one file system). A failure
removes the temporary file and raises OutputError, naming the file and the system's reason, which
every command turns into exit 1 (docs/reference/cli.md: an I/O error); the destination is never
left half-written: it is the old file or the new one."""
from __future__ import annotations

import os
import stat
import tempfile


class OutputError(Exception):
    """An output that could not be written (serq.cli: exit 1)."""


def write_text(path, text, encoding: str = "utf-8") -> None:
    """Write `text` (a string, or an iterable of strings written one after another, for an output
    too large to hold twice) to `path`, whole or not at all."""
    _write(path, text, "w", encoding)


def write_bytes(path, data: bytes) -> None:
    """write_text of bytes (a PNG)."""
    _write(path, data, "wb", None)


def _write(path, text, mode, encoding) -> None:
    path = os.fspath(path)
    try:
        _replace(path, text, mode, encoding)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _replace(path, text, mode, encoding) -> None:
    # the same directory as the destination: a rename across file systems would be a copy
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({"encoding": encoding, "newline": ""} if encoding else {})) as fh:
            if isinstance(text, (str, bytes)):
                fh.write(text)
            else:
                for chunk in text:
                    fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes the file private (0600); give it the mode the destination has, or a new
        # file would have
        os.chmod(tmp, _mode(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_dir(folder)


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
