"""What the benches share: CPU time, interleaved rounds, the median ratio with its min and max.
The machine is shared and noisy: CPU time ignores waiting for the other core, and alternating the
two sides (A, B, A, B, ...) lets a slow spell hit both alike."""
from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def cpu(fn, *args):
    """(CPU seconds of this process, result) for fn(*args): all its threads (api.run parses and
    runs in a thread of its own), after a collection so that one side's garbage is not the other's
    cost."""
    gc.collect()
    t = time.process_time()
    r = fn(*args)
    return time.process_time() - t, r


def child(argv, cwd=None, env=None):
    """Run a command to its end: (CPU seconds, user + system; peak RSS in MB; exit code; stdout;
    stderr) of that child alone (os.wait4 gives its own rusage, where RUSAGE_CHILDREN would keep
    the largest child's peak so far)."""
    import tempfile
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, p.returncode,
                out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def spread(xs) -> str:
    """The median with the min and max beside it."""
    return f"{statistics.median(xs):.2f}x (min {min(xs):.2f}, max {max(xs):.2f})"


def verdict(median: float, target: float, more_is_better: bool = True) -> str:
    ok = median >= target if more_is_better else median <= target
    return "target met" if ok else "target NOT met"
