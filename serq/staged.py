"""An output directory written whole or not at all (`serq run --dump DIR`, `serq sweep --out DIR`;
docs/reference/cli.md): checked before the work starts, filled in a staging directory next to it,
and renamed into place at the end, so that a failed or interrupted command leaves what was there.
A directory is replaced only when it holds nothing but what the command itself writes, so that a
mistyped destination (`--dump ~`) cannot delete what it holds."""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

from serq.lang.lower.inputs import UsageError


class StagedDir:
    """The destination `path` of `option` (for the messages). `foreign(target)` names an entry of an
    existing directory that `what` does not write, or returns None. A bad destination is a usage
    error; `stage` is where the files go, `commit` puts them in place, `discard` leaves nothing."""

    def __init__(self, path: str, option: str, what: str, foreign: Callable[[str], str | None]):
        self.path = path
        self.made, self.done, self.stage = None, False, None
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
        try:
            os.makedirs(parent, exist_ok=True)
            self.stage = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".serq-tmp", dir=parent)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(self.stage, 0o777 & ~mask)  # a directory as mkdir makes it, not mkdtemp's private one
        except OSError as exc:
            self.discard()
            raise UsageError(f"{option} {path}: cannot write in {parent}: {exc.strerror or exc}") from None

    def commit(self):
        """The staged files in place of the destination; on failure the destination is as it was
        (an OSError says why)."""
        if os.path.lexists(self.target):  # the previous one moved aside, removed once replaced
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(self.target)}.", suffix=".serq-old",
                                   dir=os.path.dirname(self.target))
            os.rename(self.target, os.path.join(old, "previous"))
            try:
                os.rename(self.stage, self.target)
            except OSError:
                os.rename(os.path.join(old, "previous"), self.target)
                os.rmdir(old)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.stage, self.target)
        self.done = True

    def discard(self):
        """Nothing of an unfinished output left: the staging directory and the parents made for it."""
        if self.done:
            return
        if self.stage:
            shutil.rmtree(self.stage, ignore_errors=True)
        d = os.path.dirname(self.target)
        while self.made is not None and d.startswith(self.made):
            try:
                os.rmdir(d)
            except OSError:  # something else was put there meanwhile: kept
                return
            d = os.path.dirname(d)
