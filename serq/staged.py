"""An output directory written whole or not at all (`serq run --dump DIR`, `serq sweep --out DIR`;
docs/reference/cli.md): checked before the work starts, filled in a staging directory next to it,
and renamed into place at the end, so that a failed or interrupted command leaves what was there.
A directory is replaced only when it holds nothing but what the command itself writes, so that a
mistyped destination (`--dump ~`) cannot delete what it holds; and that is looked at again when the
output is put in place, so that a file put there while the command ran is never deleted: the
command then leaves the directory as it is and keeps its output beside it (issue 50, item 1).

While a staging directory exists (and while serq/_write.py writes a file), SIGTERM, SIGHUP and SIGINT
are raised as exceptions in the main thread (`Terminated`, KeyboardInterrupt), so that the `finally`
blocks that remove it run; putting the output in place is never cut in half by one
(`deferred_signals`). Outside them the signals keep their usual effect, and so they do in a process
forked meanwhile (a sweep's worker) until it puts in its own."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import _thread
from contextlib import contextmanager
from typing import Callable

from serq._write import OutputError, replace
from serq.lang.lower.inputs import UsageError


# ------------------------------------------------------------------ signals as exceptions

class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that cleanups run (serq/cli.py then ends the
    process by the same signal). A KeyboardInterrupt, so that what handles Ctrl-C handles it too
    (Ray's waits turn any other exception raised by a signal handler into a SystemError); which
    signal it was is kept (`signalled`) where such a handler raises a KeyboardInterrupt of its own."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
_deferring = [0]      # how deep inside deferred_signals the main thread is
_pending: list = []   # the signals that came meanwhile
_last: list = []      # the last signal raised as an exception
_owner = [0]          # the process that put the handlers in (a forked child inherits them)


def _raise(signum: int):
    _last[:] = [signum]
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def forget_signals() -> None:
    """A new command: no signal raised yet (`signalled`)."""
    _last.clear()


def signalled(exc: BaseException) -> int | None:
    """The signal a KeyboardInterrupt stands for, when it is SIGTERM or SIGHUP (None: Ctrl-C)."""
    if isinstance(exc, Terminated):
        return exc.signum
    return _last[0] if _last and _last[0] != signal.SIGINT else None


def _on_signal(signum, frame):
    if os.getpid() != _owner[0]:
        # a forked child that has not put its own handlers in yet (a sweep's worker starting): the
        # driver's cleanups are not its own, and an exception here would print a traceback. SIGINT
        # is the driver's (its workers ignore it); SIGTERM and SIGHUP end it as by default
        if signum == signal.SIGINT:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _deferring[0]:
        _pending.append(signum)
        return
    f = frame
    while f is not None:
        code = f.f_code
        if code is _dropped.__code__:  # raised here it would be dropped too: sent again
            _send_again(signum)
            return
        if code.co_filename.startswith("<frozen importlib"):
            # amid an import (a command's lazy numpy, scipy, ray): a module's C code may clear an
            # exception raised there (a sweep's scipy.stats lost a SIGINT), or turn it into another
            # error. Sent again until the import is over, or has held it IMPORT_HOLD seconds
            since = _held_since.setdefault(signum, time.monotonic())
            if time.monotonic() - since < IMPORT_HOLD:
                _send_again(signum, 0.01)
                return
            break
        f = f.f_back
    _held_since.pop(signum, None)
    _resend.pop(signum, None)  # raised now: a re-send still asleep would raise it twice
    _raise(signum)


IMPORT_HOLD = 5.0
_held_since: dict = {}  # signal -> when an import first held it


_resend: dict = {}  # signal -> the token of the thread that will send it again (None: sent)


def _send_later(pid: int, signum: int, delay: float, token: object) -> None:
    if delay:
        time.sleep(delay)
    if _resend.get(signum) is token:  # not raised meanwhile
        _resend[signum] = None
        os.kill(pid, signum)


def _send_again(signum: int, delay: float = 0.0) -> None:
    # from a thread of its own (a bare one: threading's locks may be held where Python dropped the
    # exception), so that the main thread handles it at a later step, out of the code that dropped it.
    # One at a time: signals that came while one is to be sent again are that one signal, as the
    # kernel keeps one pending (four SIGINTs amid an import, each sent again on its own, raised one
    # KeyboardInterrupt after it and three more in its handler: CI, make check)
    if _resend.get(signum) is not None:
        return
    token = object()
    _resend[signum] = token
    _thread.start_new_thread(_send_later, (os.getpid(), signum, delay, token))


_hook: list = []  # the sys.unraisablehook in place before the handlers were put in


def _dropped(unraisable) -> None:
    """sys.unraisablehook while the handlers are in. Python runs a signal's handler at the main
    thread's next step, which may be inside a weakref callback or a `__del__`, where an exception is
    dropped ("Exception ignored in"): a SIGTERM during an import's module-lock callback left a sweep
    running on (CI, the reliability campaign's sweep-5). Such a signal is sent again, with no
    traceback; any other exception goes to the hook that was there."""
    exc = unraisable.exc_value
    if isinstance(exc, KeyboardInterrupt) and os.getpid() == _owner[0]:
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        if handler_installed(signum):
            _send_again(signum)
            return
    (_hook[0] if _hook else sys.__unraisablehook__)(unraisable)


def handler_installed(signum: int) -> bool:
    return signal.getsignal(signum) is _on_signal


class RaisingSignals:
    """SIGTERM, SIGHUP and SIGINT raised as exceptions, from `start` to `stop` (or as a `with`
    block), in the main thread only (elsewhere signals cannot be handled). A signal the process
    ignores (`nohup`, a background job's SIGINT) or handles its own way is left as it is; nested
    uses install once."""

    def __init__(self):
        self.saved: dict = {}

    def start(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in _SIGNALS:
            old = signal.getsignal(sig)
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            if old is _on_signal or old != default:
                continue
            try:
                signal.signal(sig, _on_signal)
            except (ValueError, OSError):
                continue
            _owner[0] = os.getpid()
            self.saved[sig] = old
        if self.saved:  # the outermost: no signal raised yet
            _last.clear()
            _held_since.clear()
            _resend.clear()
            if sys.unraisablehook is not _dropped:
                _hook[:] = [sys.unraisablehook]
                sys.unraisablehook = _dropped
        return self

    def stop(self):
        saved, self.saved = self.saved, {}
        if saved and sys.unraisablehook is _dropped:
            sys.unraisablehook = _hook.pop() if _hook else sys.__unraisablehook__
        for sig, old in saved.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError):
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


@contextmanager
def deferred_signals():
    """A step that must not be cut in half (a directory moved aside, the new one moved in): a
    signal that comes meanwhile is raised after it."""
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1
        if not _deferring[0] and _pending:
            sig = _pending[0]
            _pending.clear()
            _raise(sig)


# ------------------------------------------------------------------ the staged directory

def _prefix(target: str) -> str:
    """A staging directory's name before mkdtemp's random part: `.DIR.HOST-PID.`, so that one left by
    a command that was killed outright (SIGKILL, out of memory: no cleanup runs) is known as such by
    the next command writing there (_remove_stale)."""
    return f".{os.path.basename(target)}.{_host()}-{os.getpid()}."


def _host() -> str:
    import socket
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:64] or "host"


def _remove_stale(parent: str, base: str) -> None:
    """The staging directories `.BASE.HOST-PID.*.serq-tmp` (and `.serq-old`) of this host whose
    process is gone: what a killed command could not remove. Another host's, or a live process's,
    are left alone."""
    import re
    pat = re.compile(re.escape(f".{base}.{_host()}-") + r"(\d+)\.[^.]+\.serq-(?:tmp|old)")
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        m = pat.fullmatch(name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # alive (or another user's): not ours to remove
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, OSError):
            continue
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


class StagedDir:
    """The destination `path` of `option` (for the messages). `foreign(target)` names an entry of an
    existing directory that `what` does not write, or returns None. A bad destination is a usage
    error; `stage` is where the files go (`put` writes one), `commit` puts them in place, `discard`
    leaves nothing."""

    def __init__(self, path: str, option: str, what: str, foreign: Callable[[str], str | None]):
        self.path, self.option, self.what, self.foreign = path, option, what, foreign
        self.made, self.done, self.stage = None, False, None
        self.signals = RaisingSignals()
        if not path:
            raise UsageError(f"{option} needs a directory name")
        target = os.path.realpath(path)  # a symbolic link: the directory it names is replaced
        self.target = target
        parent = os.path.dirname(target)
        if os.path.lexists(target):
            if not os.path.isdir(target):
                raise UsageError(f"{option} {path}: it exists and is not a directory")
            cwd = os.path.realpath(os.getcwd())
            if cwd == target or cwd.startswith(target.rstrip(os.sep) + os.sep) or target == parent:
                raise UsageError(f"{option} {path}: it is the current directory or holds it; name a new one")
            try:
                extra = foreign(target)
            except OSError as exc:
                raise UsageError(f"{option} {path}: cannot read the directory: {exc.strerror or exc}") from None
            if extra is not None:
                raise UsageError(f"{option} {path}: the directory holds files {what} does not write ({extra}); "
                                 "remove it or name another")
        # the nearest existing ancestor must be a directory we can write in; missing ones are made
        anc = parent
        while not os.path.lexists(anc):
            self.made, anc = anc, os.path.dirname(anc)
        if not os.path.isdir(anc):
            raise UsageError(f"{option} {path}: {anc} is not a directory")
        self.signals.start()  # from here a signal removes what is made
        try:
            os.makedirs(parent, exist_ok=True)
            _remove_stale(parent, os.path.basename(target))
            self.stage = tempfile.mkdtemp(prefix=_prefix(target), suffix=".serq-tmp", dir=parent)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(self.stage, 0o777 & ~mask)  # a directory as mkdir makes it, not mkdtemp's private one
        except OSError as exc:
            self.discard()
            raise UsageError(f"{option} {path}: cannot write in {parent}: {exc.strerror or exc}") from None
        except BaseException:
            self.discard()
            raise

    def put(self, name: str, text) -> None:
        """One file of the output, `name` relative to the destination (a string, or an iterable of
        strings written one after another), whole: an OSError says why not (serq/_write.py)."""
        path = os.path.join(self.stage, name)
        folder = os.path.dirname(path)
        if folder != self.stage:
            os.makedirs(folder, exist_ok=True)
        replace(path, text)

    def commit(self):
        """The staged files in place of the destination. On failure the destination is as it was
        (an OSError says why); when something other than this output was put there meanwhile, it is
        left as it is and the output kept beside it (OutputError says where: exit 1)."""
        with deferred_signals():
            for _ in range(3):  # a directory made at the destination meanwhile: looked at again
                if os.path.lexists(self.target):
                    self._replace()
                    break
                try:
                    os.rename(self.stage, self.target)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not os.path.lexists(self.target):
                        raise
            else:
                self._keep("it keeps changing")
            self.done = True

    def _replace(self):
        """The destination moved aside, looked at again (what was put there before or while it moved
        is never deleted), the staged one moved in, the old one removed."""
        extra = self._foreign_now(self.target)
        if extra is not None:
            self._keep(extra)
        old = tempfile.mkdtemp(prefix=_prefix(self.target), suffix=".serq-old", dir=os.path.dirname(self.target))
        previous = os.path.join(old, "previous")
        try:
            os.rename(self.target, previous)
        except OSError:
            os.rmdir(old)
            raise
        extra = self._foreign_now(previous)
        if extra is not None:  # put there between the look and the move: put back
            os.rename(previous, self.target)
            os.rmdir(old)
            self._keep(extra)
        try:
            os.rename(self.stage, self.target)
        except OSError:
            os.rename(previous, self.target)
            os.rmdir(old)
            raise
        shutil.rmtree(old, ignore_errors=True)

    def _foreign_now(self, directory: str) -> str | None:
        if not os.path.isdir(directory) or os.path.islink(directory):
            return "it is no longer a directory"
        try:
            return self.foreign(directory)
        except OSError as exc:
            return f"it cannot be read: {exc.strerror or exc}"

    def _keep(self, extra: str):
        """The destination left as it is; the staged output renamed beside it, under a name that says
        so (`DIR.new`, `DIR.new2`, ...), and OutputError says where."""
        kept = None
        for k in range(1, 100):
            name = f"{self.target}.new{k if k > 1 else ''}"
            if os.path.lexists(name):
                continue
            try:
                os.rename(self.stage, name)
            except OSError:
                continue
            kept, self.stage = name, None
            break
        if kept is None:  # nowhere else to put it: left in the staging directory, said
            kept, self.stage = self.stage, None
        # as the user named the destination: `--out runs/x` is kept in `runs/x.new`
        shown = self.path.rstrip(os.sep) + kept[len(self.target):] if kept.startswith(self.target + ".") else kept
        self.done = True
        raise OutputError(f"{self.option} {self.path}: something other than {self.what}'s files was put there "
                          f"while the command ran ({extra}); the directory is left as it is, and the new output "
                          f"is in {shown}")

    def discard(self):
        """Nothing of an unfinished output left: the staging directory and the parents made for it."""
        try:
            if self.done:
                return
            if self.stage:
                shutil.rmtree(self.stage, ignore_errors=True)
                self.stage = None
            d = os.path.dirname(self.target)
            while self.made is not None and d.startswith(self.made):
                try:
                    os.rmdir(d)
                except OSError:  # something else was put there meanwhile: kept
                    return
                d = os.path.dirname(d)
        finally:
            self.signals.stop()
