"""`--dump DIR` (report.md): the samples behind the report as CSV files, written whole or not at all.

The destination is checked, and a staging directory made next to it, before the run; the files go
into the staging directory, which is renamed into place when they are all written. A previous dump
(or an empty directory) at DIR is replaced; any other directory is refused, so that a mistyped
`--dump ~` cannot delete what it holds (cli.md, *--dump*)."""
from __future__ import annotations

import csv
import fnmatch
import os
import shutil
import tempfile

from serq.lang.lower.inputs import UsageError

# the names a dump writes, in DIR and in DIR/gauge: what makes a directory a previous dump
TOP = ("observe_*.csv", "client_*.csv")
GAUGES = "gauge"


def write(sim, rep: dict, directory: str):
    """Each observation's samples, the client's, and every gauge's change points, into directory."""
    os.makedirs(os.path.join(directory, GAUGES), exist_ok=True)
    for name, ser in sim.obs.items():
        _csv(os.path.join(directory, f"observe_{name}.csv"), ["time", "session", "turn", "value"], ser.dump_rows())
    for name, ser in sim.client.items():
        if ser.v:
            _csv(os.path.join(directory, f"client_{name}.csv"), ["value"], ([v] for v in ser.after()))
    for name, _, avg in sim.gauges:
        _csv(os.path.join(directory, GAUGES, f"{name}.csv"), ["time", "value"],
             (p for p in avg.points if p[0] <= rep["end"]))


def _csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def is_dump(directory: str) -> bool:
    """True when directory holds nothing but what a dump writes (an empty directory included)."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False) and entry.name == GAUGES:
            if not all(e.is_file(follow_symlinks=False) and e.name.endswith(".csv") for e in os.scandir(entry.path)):
                return False
        elif not (entry.is_file(follow_symlinks=False) and any(fnmatch.fnmatch(entry.name, p) for p in TOP)):
            return False
    return True


class Staged:
    """A dump's destination, checked and staged before the run: `write` puts the files in place,
    `discard` leaves the destination as it was. A bad destination is a usage error."""

    def __init__(self, path: str):
        self.path = path
        if not path:
            raise UsageError("--dump needs a directory name")
        target = os.path.realpath(path)  # a symbolic link: the directory it names is replaced
        self.target = target
        parent = os.path.dirname(target)
        if os.path.lexists(target):
            if not os.path.isdir(target):
                raise UsageError(f"--dump {path}: it exists and is not a directory")
            cwd = os.path.realpath(os.getcwd())
            if cwd == target or cwd.startswith(target.rstrip(os.sep) + os.sep) or target == parent:
                raise UsageError(f"--dump {path}: it is the current directory or holds it; name a new one")
            try:
                ok = is_dump(target)
            except OSError as exc:
                raise UsageError(f"--dump {path}: cannot read the directory: {exc.strerror or exc}") from None
            if not ok:
                raise UsageError(f"--dump {path}: the directory holds files a dump does not write; "
                                 "remove it or name another")
        # the nearest existing ancestor must be a directory we can write in; missing ones are made
        self.made, self.done = None, False
        anc = parent
        while not os.path.lexists(anc):
            self.made, anc = anc, os.path.dirname(anc)
        if not os.path.isdir(anc):
            raise UsageError(f"--dump {path}: {anc} is not a directory")
        try:
            os.makedirs(parent, exist_ok=True)
            self.stage = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".serq-tmp", dir=parent)
        except OSError as exc:
            self._remove_made()
            raise UsageError(f"--dump {path}: cannot write in {parent}: {exc.strerror or exc}") from None

    def write(self, sim, rep: dict):
        """The files into the staging directory, then renamed into place; on failure nothing is left
        but what was at the destination before. An OSError says why."""
        try:
            write(sim, rep, self.stage)
            if os.path.lexists(self.target):  # the previous dump moved aside, removed once replaced
                old = tempfile.mkdtemp(prefix=f".{os.path.basename(self.target)}.", suffix=".serq-old",
                                       dir=os.path.dirname(self.target))
                os.rename(self.target, os.path.join(old, "dump"))
                try:
                    os.rename(self.stage, self.target)
                except OSError:
                    os.rename(os.path.join(old, "dump"), self.target)
                    os.rmdir(old)
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(self.stage, self.target)
            self.done = True
        finally:
            self.discard()

    def discard(self):
        """Nothing of an unfinished dump left: the staging directory and the parents made for it."""
        if self.done:
            return
        shutil.rmtree(self.stage, ignore_errors=True)
        self._remove_made()

    def _remove_made(self):
        d = os.path.dirname(self.target)
        while self.made is not None and d.startswith(self.made):
            try:
                os.rmdir(d)
            except OSError:  # something else was put there meanwhile: kept
                return
            d = os.path.dirname(d)
