"""Input and output going wrong around the command line (issue 7, items 5 and 8): files that cannot be
read, output that cannot be written, `--dump` destinations, a limited address space. Each gets its own
message and exit status, never a traceback and never the internal-error safety net.

The tests run as root, for whom a chmod-ed file or directory is still readable and writable: an
unreadable file is a link to /proc/self/mem (whose read fails with EIO), an unwritable place is under
a regular file or in /proc."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import types

import pytest

from serq import api
from serq.interp import dump

from test_cli import PROG_K, cli

SERQ = [sys.executable, "-m", "serq.cli"]


@pytest.fixture
def progk(tmp_path):
    f = tmp_path / "k.sq"
    f.write_text(PROG_K)
    return str(f)


# ------------------------------------------------------------------ reading


def test_files_that_cannot_be_read(capsys, tmp_path, progk):
    (tmp_path / "latin1.json").write_bytes(b'{"version": 1, "caf\xe9": 1}')
    os.symlink("/proc/self/mem", tmp_path / "mem.sq")
    os.symlink("/proc/self/mem", tmp_path / "mem.json")
    os.symlink("loop.sq", tmp_path / "loop.sq")
    os.mkdir(tmp_path / "dir.json")
    for name, says in [("latin1.json", "error[P005]: the file is not UTF-8 text"),
                       ("mem.sq", "error[P006]: cannot read the file: Input/output error"),
                       ("mem.json", "error[P006]: cannot read the file: Input/output error"),
                       ("loop.sq", "error[P006]: cannot read the file: Too many levels of symbolic links"),
                       ("dir.json", "error[P006]: cannot read the file: Is a directory"),
                       ("missing.json", "error[P006]: cannot read the file: No such file or directory")]:
        for cmd in ("check", "ir", "run", "target"):
            rc, out, err = cli(capsys, cmd, str(tmp_path / name))
            assert rc == 1 and err.startswith(f"{tmp_path / name}:1:1: {says}\n"), (cmd, name, err)
    rc, out, err = cli(capsys, "check", str(tmp_path))
    assert rc == 1 and "error[P006]: cannot read the file: Is a directory" in err


def test_instance_files_that_cannot_be_read(capsys, tmp_path, progk):
    (tmp_path / "latin1.json").write_bytes(b'{"inputs": {"caf\xe9": 1}}')
    (tmp_path / "deep.json").write_text('{"inputs": ' + "[" * 100000 + "]" * 100000 + "}")
    os.symlink("/proc/self/mem", tmp_path / "mem.json")
    for name, says in [("latin1.json", "cannot read the instance file {}: it is not UTF-8 text"),
                       ("mem.json", "cannot read the instance file {}: Input/output error"),
                       ("deep.json", "{}: the instance file nests too deeply to read"),
                       ("", "cannot read the instance file {}: Is a directory")]:
        path = str(tmp_path / name) if name else str(tmp_path)
        rc, out, err = cli(capsys, "run", progk, "--horizon", "10", "--instance", path)
        assert rc == 2 and err == f"serq: error: {says.format(path)}\n", err


def test_a_trace_that_cannot_be_read(capsys, tmp_path):
    os.symlink("/proc/self/mem", tmp_path / "t.csv")
    f = tmp_path / "t.sq"
    f.write_text('fn main() { stage s : delay; workload { arrive renewal(1); trace "t.csv"; } '
                 'server { run s (cost(s, 1)); } }')
    rc, out, err = cli(capsys, "run", str(f), "--arrivals", "1")
    assert rc == 1 and "error[T002]: cannot read the trace: Input/output error" in err, err


# ------------------------------------------------------------------ writing the output


def test_a_closed_pipe_ends_quietly(progk):
    """`serq run ... --json | true`: the reader is gone before the report is written."""
    p = subprocess.Popen([*SERQ, "run", progk, "--horizon", "100", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait() == 141 and err == b""  # 128 + SIGPIPE, what a shell shows for `yes | true`


def test_a_full_disk_is_an_error_with_its_reason(progk):
    with open("/dev/full", "w") as full:
        r = subprocess.run([*SERQ, "run", progk, "--horizon", "100", "--json"], stdout=full, stderr=subprocess.PIPE,
                           text=True)
        assert r.returncode == 1 and r.stderr == "serq: error: cannot write the output: No space left on device\n"
    # stdout closed (`>&-`): Python has no sys.stdout at all
    r = subprocess.run(["bash", "-c", " ".join([*SERQ, "ir", progk, ">&-"])], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr == "serq: error: cannot write the output: standard output is closed\n"
    with open("/dev/full", "w") as full:
        # diagnostics into a full disk: nobody to tell, but no crash either
        r = subprocess.run([*SERQ, "check", progk], stdout=subprocess.PIPE, stderr=full)
        assert r.returncode == 0


def test_a_limited_address_space(tmp_path, progk):
    """`ulimit -v 500000`: the parser's thread got a stack too large to map (512 MiB); deep input is
    still refused with P007."""
    deep = tmp_path / "deep.sq"
    deep.write_text("fn main() { stage s : fifo; workload { arrive poisson(1); turn { set x = " + "-" * 30000
                    + "1; } } server { run s (cost(s, 1)); } }")
    py = " ".join([sys.executable, "-m", "serq.cli"])
    r = subprocess.run(["bash", "-c", f"ulimit -v 500000; {py} run {progk} --horizon 500 --json && {py} check {deep}"],
                       capture_output=True, text=True)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["horizon"] == 500
    assert r.returncode == 1 and r.stderr.splitlines()[0] == f"{deep}:1:1: error[P007]: the program nests too deeply to read"


def test_smaller_stacks_when_a_thread_cannot_start(monkeypatch):
    """_deep falls back to a smaller stack, then to the caller's thread; deep input is P007 in each."""
    real = threading

    def fake(max_stack):
        tried = []

        class Thread(real.Thread):
            def start(self):
                tried.append(real.stack_size())  # (which also sets it to 0: the last call wins)
                real.stack_size(tried[-1])
                if tried[-1] > max_stack:
                    raise RuntimeError("can't start new thread")
                super().start()

        monkeypatch.setattr(api, "threading", types.SimpleNamespace(stack_size=real.stack_size, Thread=Thread))
        return tried

    deep = "fn main() { stage s : fifo; workload { arrive poisson(1); turn { set x = " + "-" * 30000 + "1; } } " \
           "server { run s (cost(s, 1)); } }"
    ok = "fn main() { stage s : fifo; workload { arrive poisson(1); turn { set x = " + "-" * 150 + "1; } } " \
         "server { run s (cost(s, x)); } }"
    for max_stack, expect in ((16 << 20, [64 << 20, 16 << 20]), (0, [64 << 20, 16 << 20])):
        tried = fake(max_stack)
        assert api.load_text(ok).workload is not None
        with pytest.raises(api.SerqError) as e:
            api.load_text(deep)
        assert e.value.code == "P007"
        assert tried[:2] == expect, tried


# ------------------------------------------------------------------ --dump DIR


def _dump_run(capsys, progk, d, *more):
    return cli(capsys, "run", progk, "--json", "--dump", str(d), *(more or ("--horizon", "500")))


def test_dump_destinations_refused_before_the_run(capsys, tmp_path, progk):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for d, says in [(tmp_path / "afile", "it exists and is not a directory"),
                    (tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} is not a directory"),
                    ("/proc/serq-dump", "cannot write in /proc: No such file or directory"),
                    (tmp_path / "mine", "the directory holds files a dump does not write (notes.txt); remove it or name another")]:
        # --warmup past the run's drain would be an error after the run (R033): the check comes first
        rc, out, err = _dump_run(capsys, progk, d, "--arrivals", "3", "--warmup", "1e6")
        assert rc == 2 and out == "" and err == f"serq: error: --dump {d}: {says}\n", err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    rc, out, err = _dump_run(capsys, progk, "")
    assert rc == 2 and err == "serq: error: --dump needs a directory name\n"
    assert sorted(os.listdir(tmp_path)) == ["afile", "k.sq", "mine"]


def test_dump_replaces_a_previous_dump_and_makes_parents(capsys, tmp_path, progk):
    d = tmp_path / "runs" / "a"
    rc, out, err = _dump_run(capsys, progk, d)
    assert rc == 0, err
    first = sorted(os.listdir(d))
    assert first == ["client_response.csv", "dump.json", "gauge", "requests.csv", "stage"]
    (d / "observe_stale.csv").write_text("time,session,turn,value\n")  # as if an older program's
    rc, out, err = _dump_run(capsys, progk, d, "--horizon", "500", "--seed", "2")
    assert rc == 0, err
    assert sorted(os.listdir(d)) == first and os.listdir(tmp_path / "runs") == ["a"]  # nothing staged left


def test_a_failed_run_or_write_leaves_no_dump(capsys, tmp_path, progk, monkeypatch):
    d = tmp_path / "new" / "d"
    rc, out, err = _dump_run(capsys, progk, d, "--arrivals", "3", "--warmup", "1e6")
    assert rc == 1 and "error[R033]" in err
    assert os.listdir(tmp_path) == ["k.sq"]  # neither the dump nor the parent made for it
    # a previous dump stays whole when writing the next one fails half-way (a full disk)
    old = tmp_path / "old"
    assert _dump_run(capsys, progk, old)[0] == 0
    before = {p: (old / p).read_text() for p in ("client_response.csv",)}
    calls = []
    real = dump._csv

    def failing(path, header, rows):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, header, rows)

    monkeypatch.setattr(dump, "_csv", failing)
    (tmp_path / "k.sq").write_text(PROG_K.replace("server {", "gauge g = 1;\n  server {"))
    rc, out, err = _dump_run(capsys, progk, old, "--horizon", "500", "--seed", "3")
    assert rc == 1 and err == f"serq: error: cannot write the dump {old}: No space left on device\n", err
    assert len(calls) == 2 and {p: (old / p).read_text() for p in before} == before
    assert sorted(os.listdir(tmp_path)) == ["k.sq", "old"]


# ------------------------------------------------------------------ the safety net


def test_an_unexpected_exception_is_one_line_exit_3(capsys, progk, monkeypatch):
    def boom(*a, **k):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(api, "load", boom)
    rc, out, err = cli(capsys, "check", progk)
    assert rc == 3 and err == ("serq: internal error: ZeroDivisionError: float division by zero "
                               "(a bug in serQ; SERQ_DEBUG=1 shows where)\n")
    monkeypatch.setenv("SERQ_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        cli(capsys, "check", progk)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "load", interrupted)
    rc, out, err = cli(capsys, "check", progk)
    assert rc == 130 and err == "serq: interrupted\n"


EARLY = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # (pytest-xdist's workers ignore it)
class Hook:  # Ctrl-C as serq.api is imported: amid the command's start-up imports
    def find_spec(self, name, path, target=None):
        if name == "serq.api":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hook())
sys.argv = [%r, "check", "x.sq"]
try:
    import serq.cli
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""


@pytest.mark.parametrize("argv0", ["serq", "a-program"])
def test_ctrl_c_while_the_command_starts(argv0):
    """SIGINT during serq.cli's imports (most of a short command's start-up, before _guarded runs) is
    held until they end: the command says so and exits 130 with no traceback; a program importing
    the module gets the KeyboardInterrupt then (a stress of signals at random points caught a
    traceback at 0.08 s, a pydantic_core panic at 0.06 s, and an exit by SIGINT at 0.1 s)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", EARLY % argv0], capture_output=True, text=True, timeout=60)
    if argv0 == "serq":
        assert (r.returncode, r.stdout, r.stderr) == (130, "", "serq: interrupted\n")
    else:
        assert (r.returncode, r.stdout) == (0, "KeyboardInterrupt\n"), r.stderr


FORKED = r"""
import os, signal, sys, time
from serq.staged import RaisingSignals, deferred_signals
with RaisingSignals():
    with deferred_signals():  # inherited too: the child must not wait for the parent's step to end
        pid = os.fork()
    if pid == 0:  # a sweep's worker before its initializer puts its own handlers in
        time.sleep(10)
        os._exit(0)
    time.sleep(0.3)
    os.kill(pid, signal.%s)
    if signal.%s == signal.SIGINT:
        time.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit %%d" %% os.WEXITSTATUS(status))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_forked_child_is_not_the_commands_cleanup(sig):
    """A process forked while serQ raises signals as exceptions (a sweep's worker, before its
    initializer runs) inherits the handler: SIGTERM and SIGHUP end it as by default, with no
    traceback (the reliability campaign's sweep-2 caught one in CI), and SIGINT, the driver's, is
    ignored (the child lives until killed)."""
    import signal as S
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", FORKED % (sig, sig)], capture_output=True, text=True, timeout=60)
    want = S.SIGKILL if sig == "SIGINT" else getattr(S, sig)
    assert r.stdout.split() == [str(int(want))], (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
