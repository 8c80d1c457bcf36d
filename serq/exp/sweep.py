"""`serq sweep` (issue 13; docs/reference/cli.md, *serq sweep*): a program over a grid of its
inputs times K seeds, on the local cores or a Ray cluster. One row per run (runs.csv,
runs.jsonl), a summary per grid point (summary.csv) and what was swept (sweep.json), the same
bytes whatever the parallelism.

Every grid point is linked here first, so a program error is a diagnostic before any run starts;
a worker gets the linked IR as JSON and the settings, and never reads the source. scipy and Ray
are imported inside the command only: `serq check` does not pay for them."""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import os
import signal
import sys
import tempfile
import time

from serq.diagnostics import SerqError
from serq.interp.stats import mean_of, squares
from serq.lang.lower.inputs import UsageError
from serq.staged import StagedDir

FILES = ("runs.csv", "runs.jsonl", "summary.csv", "sweep.json")
RETRIES = 2  # a task whose worker process died is run again this many times, then reported failed
DEFAULT_SEEDS = 5
# the most runs one sweep takes (points times seeds; a search's estimate): every run's row is held in
# memory until the tables are written (some kilobytes each), so more would take gigabytes before a
# table is written. Checked before anything is built (issue 50, item 6: --seeds 1000000000)
MAX_RUNS = 100_000
JOIN_SECONDS = 5.0  # how long an ended worker is waited for before it is killed
_TERM_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))
# report keys that are not columns: seed is one already, horizon and warm-up are in sweep.json
# (vllm_bench: the client's figures again, under vLLM's names: serq run's report has them)
_NOT_COLUMNS = ("seed", "horizon", "warmup", "notes", "vllm_bench")
# runs.csv's own columns: an input of one of these names would overwrite it in a row. (summary.csv's
# stat, n, mean, ci95, lo, hi may repeat an input's name, mg1.sq's `mean`: its header then has the
# name twice, the input's first, as sweep.json's grid places it)
_TAKEN = ("point", "seed", "status", "error", "end", "growing_at_end")
_EXTRA = "pip install 'serq[experiments]'"


def arguments(sp) -> None:
    sp.add_argument("file", help="the program (.sq), or the IR `serq ir` wrote (.json: no --grid, --find or inputs)")
    sp.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="an args.number input and its values (repeatable: the grid is their product)")
    sp.add_argument("--seeds", default=str(DEFAULT_SEEDS), metavar="K",
                    help=f"replications: seeds S..S+K-1 at each point (default {DEFAULT_SEEDS})")
    sp.add_argument("--seed", metavar="S", help="the first seed (default 1)")
    sp.add_argument("--horizon", metavar="T",
                    help="every run's horizon: the simulated time it ends at, as for serq run")
    sp.add_argument("--warmup", metavar="W",
                    help="every run's warm-up: the simulated time before which nothing is measured (default 0)")
    sp.add_argument("--arrivals", metavar="N",
                    help="every run takes exactly N open-workload arrivals and drains their sessions")
    sp.add_argument("--jobs", metavar="N", help="worker processes (default: the number of cores; 1: in this process)")
    sp.add_argument("--cluster", metavar="ADDRESS",
                    help="run the tasks on a Ray cluster (ray.init(address=ADDRESS)); 'local' starts one here")
    sp.add_argument("--out", metavar="DIR", help="the output directory (default: sweep-STEM)")
    sp.add_argument("--quiet", action="store_true", help="no progress")
    # the largest value of one input that meets service-level objectives (serq/exp/find.py)
    sp.add_argument("--find", metavar="NAME=LO:HI",
                    help="search the input NAME between LO and HI, by bisection, for the largest value at which "
                         "every --slo holds")
    sp.add_argument("--slo", action="append", default=[], metavar="METRIC<=X",
                    help="an objective for --find: a summary.csv statistic's mean over the seeds is <= X "
                         "(or >= X); repeatable, all must hold")
    sp.add_argument("--tol", metavar="X",
                    help="--find stops when the interval is X wide, or X%% of HI-LO (default 1%%)")
    sp.add_argument("--json", action="store_true", help="--find's result as one JSON object")
    sp.add_argument("--percentiles", metavar="P,P,...", help="the percentiles of each run's statistics, as for "
                    "serq run (default 50,90,99; an objective's, --slo ttft.p95<=..., added)")


# ------------------------------------------------------------------ the command

def command(args) -> int:
    from serq import api
    from serq.cli import settings_from  # the flags read as `serq run` reads them

    inst = api.parse_instance(args.instance) if args.instance else {}
    fixed, base = settings_from(args, inst)
    k = _count(args.seeds, "--seeds")
    jobs = _count(args.jobs, "--jobs") if args.jobs is not None else (os.cpu_count() or 1)
    grid = _grid(args.grid, fixed)
    find = None
    if args.find is not None or args.slo or args.tol is not None or args.json:
        from serq.exp.find import Find
        find = Find.from_args(args, grid, fixed)
    _check_size(k, grid, find)
    seeds = list(range(base.seed, base.seed + k))
    if args.file.endswith(".json") and (grid or fixed or find):
        what = "--find" if find else "--grid and inputs"
        raise UsageError(f"{args.file} is an IR, its inputs resolved already: {what} need the program")
    out = None
    try:  # the destination checked before any run; from here a signal removes its staging directory
        out = _Out(args.out if args.out is not None else f"sweep-{_stem(args.file)}")
        names = [n for n, _ in grid]
        points = [dict(zip(names, vs)) for vs in itertools.product(*(vs for _, vs in grid))]
        settings = {"horizon": base.horizon, "warmup": base.warmup, "arrivals": base.arrivals}
        from serq.cli import _percentiles
        pcts = _percentiles(args.percentiles, find.slos if find is not None else [])
        if pcts is not None:  # each run's summaries' (run_one)
            settings["percentiles"] = list(pcts)
        if find is None:
            irs = [_link(api, args.file, {**fixed, **pt}, base) for pt in points]
            t_ppf = _t_quantile()  # scipy missing: refused before anything runs
            tasks = [(p, s) for p in range(len(points)) for s in seeds]
            bar = _Bar(len(tasks), args.quiet)
            runner = Runner(args.cluster, jobs, args.jobs is not None, bar)
            try:
                results = runner.run(irs, tasks, settings)
            finally:
                runner.close()
                bar.close()
        else:  # the points are the search's: those it tried, each with every seed
            t_ppf = find.run(api, args.file, fixed, base, points, seeds, settings,
                             lambda bar: Runner(args.cluster, jobs, args.jobs is not None, bar), args.quiet)
            points, names, tasks, results = find.tables()
        rows, columns = _rows(points, names, tasks, results)
        failed = sum(r["status"] != "ok" for r in rows)
        meta = {"program": args.file, "grid": {n: [_plain(v) for v in vs] for n, vs in grid}, "seeds": seeds,
                "settings": {k2: _plain(v) for k2, v in settings.items()},
                "inputs": {n: _plain(v) for n, v in sorted(fixed.items())},
                "runs": len(rows), "failed": failed, "columns": columns, "serq": _version()}
        from serq.cli import program_id, sizing_summary
        if not args.file.endswith(".json"):   # the program's files and their hash, as serq run --json says them
            meta["program_files"] = program_id(api.load(args.file, fixed, base))
        sized = sizing_summary(args, fixed)
        if sized is not None:                 # the model, GPU and tp the catalogue sized (docs/sizing.md)
            meta["sizing"] = {k2: sized[k2] for k2 in ("model", "gpu", "tp", "kv_blocks", "block_size")}
        if find is not None:  # the searched input first: `serq plot DIR` draws against it
            meta["grid"] = {find.name: [_plain(v) for v in sorted({p[find.name] for p in points})], **meta["grid"]}
            meta["find"] = find.as_json()
        try:
            out.write({"runs.csv": _csv(columns, rows),
                       "runs.jsonl": "".join(json.dumps({c: _json(r.get(c)) for c in columns}, allow_nan=False) + "\n"
                                             for r in rows),
                       "summary.csv": _summary(rows, columns, names, t_ppf),
                       "sweep.json": json.dumps(_json(meta), indent=1, allow_nan=False) + "\n"})
        except OSError as exc:
            from serq._write import OutputError  # exit 1, as for `serq run`'s output
            raise OutputError(f"cannot write the sweep to {out.path}: {exc.strerror or exc}") from None
    finally:
        if out is not None:
            out.discard()
    _tell_failures(rows, names)
    done = f"{len(rows)} runs, {failed} failed: {out.path} ({', '.join(FILES)})"
    if find is not None:
        find.show(args.json, seeds, {"runs": len(rows), "failed": failed, "out": out.path})
        if args.json:  # stdout is the one JSON object
            _say(f"serq sweep: {done}")
            return 1 if failed else 0
    _print(done)
    return 1 if failed else 0


def _count(text, what) -> int:
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"{what} is a positive integer, not {text!r}") from None
    if not (v >= 1 and v < math.inf and v == int(v)):
        raise UsageError(f"{what} is a positive integer, not {text}")
    return int(v)


def _check_size(seeds: int, grid, find) -> None:
    """At most MAX_RUNS runs: the grid's points times the seeds (a search: times the values it may
    try, its estimate before any run), refused before anything is built or linked."""
    points = math.prod(len(vs) for _, vs in grid)
    values = 1
    if find is not None:
        from serq.exp.find import _halvings
        values = 2 + _halvings(find.hi - find.lo, find.tol)
    runs = points * seeds * values
    if runs > MAX_RUNS:
        what = (f"{seeds:,} seed{'s' if seeds != 1 else ''}" + (f" at each of {points:,} grid points" if grid else "")
                + (f", at each of the {values} values --find may try" if find is not None else ""))
        raise UsageError(f"a sweep takes at most {MAX_RUNS:,} runs (each run's row is held until the tables are "
                         f"written), not {runs:,} ({what}): fewer seeds or points, or several sweeps")


def _grid(specs: list[str], fixed: dict) -> list[tuple[str, list[float]]]:
    """Each `--grid NAME=V1,V2,...` in order; whether NAME is an input the linker says (a usage error)."""
    from serq.cli import _number
    grid = []
    for spec in specs:
        name, eq, vals = spec.partition("=")
        name = name.strip()
        if not eq or not name:
            raise UsageError(f"--grid is NAME=V1,V2,..., not {spec!r}")
        if any(name == n for n, _ in grid):
            raise UsageError(f"--grid {name} is given twice")
        if name in _TAKEN:
            raise UsageError(f"--grid {name}: the tables have a column `{name}` already; "
                             "sweep an input of another name")
        if name in fixed:
            raise UsageError(f"input {name} is both swept (--grid) and fixed (--set, --instance or after --)")
        items = [x.strip() for x in vals.split(",")]
        if not vals.strip() or any(not x for x in items):
            raise UsageError(f"--grid {name}: an empty value in {vals!r} (values are numbers separated by commas)")
        values = []
        for x in items:
            v = _number(x, f"--grid {name}")  # as `serq run` reads a number
            if v in values:
                raise UsageError(f"--grid {name}: the value {x} is listed twice")
            values.append(v)
        grid.append((name, values))
    return grid


def _link(api, path, inputs, base):
    """One grid point linked (a program error: its diagnostic, exit 1) and checked to be runnable as
    `serq run` checks it (an unbounded run: a usage error), before any run starts. A trace is named
    by its absolute path, so a worker in another directory finds it."""
    from serq.interp.sim import Sim
    prog = api.load(path, inputs, base)
    tr = prog.workload.trace
    if tr is not None:
        prog = prog.model_copy(update={"workload": prog.workload.model_copy(
            update={"trace": tr.model_copy(update={"file": os.path.abspath(tr.file)})})})
    Sim(prog, base)._bounded(prog.workload.arrive)  # Sim reads the trace: a malformed one is its diagnostic
    # each run's seed is given to it (run_one); the IR's own is left out, so that a seed of any size
    # (past the 4,300 digits pydantic's JSON parser reads) reaches the runs
    return prog.model_copy(update={"settings": prog.settings.model_copy(update={"seed": 1})}).model_dump_json()


def _t_quantile():
    """Student's t's 0.975 quantile of df degrees of freedom: scipy.stats.t.ppf's own computation
    (its _ppf is stdtrit), without importing scipy.stats (~0.5 s of a sweep's start-up)."""
    import importlib.util
    try:
        if importlib.util.find_spec("scipy.stats") is None:  # found, not imported: scipy as the intervals need it
            raise ImportError("scipy.stats")
        from scipy.special import stdtrit
    except (ImportError, ValueError):
        raise UsageError(f"serq sweep needs scipy for its intervals: {_EXTRA}") from None
    cache: dict[int, float] = {}

    def ppf(df: int) -> float:
        if df not in cache:
            cache[df] = float(stdtrit(df, 0.975))
        return cache[df]
    return ppf


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path.rstrip("/")))[0] or "program"


def _version() -> str:
    from serq.cli import version
    return version()


# ------------------------------------------------------------------ one run (in a worker)

_PARSED: dict[str, object] = {}  # a worker's latest program: IR JSON -> Program (the runs come point by point)


def run_one(ir_json: str, settings: dict, seed: int) -> dict:
    """One run: {"status": "ok", "values": {column: number}} or {"status": "failed", "error": why}.
    A program's run-time error is deterministic: a failed run, never retried."""
    from serq import api
    from serq.interp.report import finite
    from serq.ir import model as I
    try:
        prog = _PARSED.get(ir_json)
        if prog is None:
            _PARSED.clear()
            prog = _PARSED[ir_json] = I.Program.model_validate_json(ir_json)
        pcts = settings.get("percentiles")
        rep = api.run(prog, I.Settings(seed=seed, **{k: v for k, v in settings.items()
                                                      if v is not None and k != "percentiles"}), percentiles=pcts)
    except SerqError as exc:
        return {"status": "failed", "error": f"{exc.span}: error[{exc.code}]: {exc.message}"}
    except UsageError as exc:
        return {"status": "failed", "error": str(exc)}
    except OSError as exc:  # the samples past 2^20 a statistic go to a temporary file
        return {"status": "failed", "error": f"the run could not keep its samples in a temporary file in "
                f"{tempfile.gettempdir()}: {exc.strerror or exc}"}
    except MemoryError:
        return {"status": "failed", "error": "out of memory"}
    except Exception as exc:  # a bug in serQ: this run's row says so, the other runs go on
        return {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc} (a bug in serQ)"}
    rep.pop("_sim", None)
    return {"status": "ok", "values": flatten(finite(rep))}


def flatten(rep: dict) -> dict:
    """The report's numbers (and claim statuses) as dotted columns, in the report's key order."""
    out: dict = {}

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "kind" and path.startswith("stages."):
                    continue  # what the stage is, the program's: not a result of the run
                walk(x, f"{path}.{k}")
        else:
            out[path] = v
    for k, v in rep.items():
        if k not in _NOT_COLUMNS:
            walk(v, k)
    return out


# ------------------------------------------------------------------ where the runs go

def _failed(error: str) -> dict:
    return {"status": "failed", "error": error}


def _in_process(irs, tasks, settings, bar) -> dict:
    results = {}
    for p, s in tasks:
        results[(p, s)] = run_one(irs[p], settings, s)
        bar.tick()
    return results


_POOL: dict = {}  # a pool worker's programs and the queue it reports each task's start on


def _pool_init(irs, started, parent):
    from serq.staged import handler_installed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it ends the workers
    for sig in _TERM_SIGNALS:  # the driver's cleanups (serq/staged.py) are not a worker's: SIGTERM ends it
        if handler_installed(sig):
            signal.signal(sig, signal.SIG_DFL)
    _die_with(parent)
    _quiet_stdout()
    _POOL["irs"], _POOL["started"] = irs, started


def _die_with(parent: int) -> None:
    """A worker ends when the sweep that started it does, however it ended (SIGKILL, out of
    memory), so that none is left running, holding the caller's pipes: on Linux the kernel kills it
    (prctl PR_SET_PDEATHSIG); elsewhere, or where that is refused, a thread of its own looks at its
    parent's id every 0.2 s (a re-parented process has another)."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent died before the prctl took
        os._exit(1)
    if not armed:
        import threading

        def watch():
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)
        threading.Thread(target=watch, name="serq-parent-watch", daemon=True).start()


def _quiet_stdout() -> None:
    """A worker's stdout is /dev/null: the command's stdout is its result, the driver's alone."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


def _pool_task(p, settings, seed):
    _POOL["started"].put((p, seed))
    return run_one(_POOL["irs"][p], settings, seed)


def _on_pool(jobs, irs, tasks, settings, bar) -> dict:
    """The tasks on `jobs` worker processes, results as they finish. A worker that dies breaks the
    pool: the tasks it had started are charged a try and run again one at a time (so a death is
    charged to the task that caused it), up to RETRIES more times; the others are resubmitted."""
    import multiprocessing as mp
    # fork: a worker starts with serQ imported and the programs in memory (Linux; elsewhere the default)
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    results: dict = {}
    tries: dict = {}
    todo, alone = list(tasks), []
    while todo or alone:
        if alone:
            batch, width = [alone.pop(0)], 1
        else:
            batch, todo, width = todo, [], jobs
        unfinished, started = _pool_round(ctx, min(width, len(batch)), irs, batch, settings, results, bar)
        suspects = [t for t in unfinished if t in started] or unfinished
        for t in unfinished:
            if t not in suspects:
                todo.append(t)
                continue
            tries[t] = tries.get(t, 0) + 1
            if tries[t] > RETRIES:
                results[t] = _failed(f"its worker process died {tries[t]} times (killed, or out of memory)")
                bar.tick()
            else:
                alone.append(t)
    return results


def _pool_round(ctx, width, irs, batch, settings, results, bar):
    """One pool over `batch`; the tasks left unfinished when it broke, and those it had started."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool
    started_q = ctx.SimpleQueue()
    pool = ProcessPoolExecutor(max_workers=width, mp_context=ctx, initializer=_pool_init,
                               initargs=(irs, started_q, os.getpid()))
    clean = False
    try:
        futs = {pool.submit(_pool_task, p, settings, s): (p, s) for p, s in batch}
        for f in as_completed(futs):
            try:
                res = f.result()
            except BrokenProcessPool:
                break
            results[futs[f]] = res
            bar.tick()
        for f, t in futs.items():  # finished before the pool broke, not yet seen
            if t not in results and f.done() and not f.cancelled() and f.exception() is None:
                results[t] = f.result()
                bar.tick()
        clean = True
    finally:
        if not clean:  # interrupted (Ctrl-C, SIGTERM) or failed: the workers are ended and waited for
            from serq.staged import deferred_signals
            with deferred_signals():  # a second signal does not cut this short: raised after
                _end(list((getattr(pool, "_processes", None) or {}).values()))
        pool.shutdown(wait=clean, cancel_futures=True)
    started = set()
    while not started_q.empty():
        started.add(started_q.get())
    return [t for t in batch if t not in results], started


def _end(procs) -> None:
    """Worker processes terminated, waited for (killed if they do not end), so that none is left
    holding the caller's stdout or stderr."""
    for proc in procs:
        try:
            proc.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    deadline = time.monotonic() + JOIN_SECONDS
    for proc in procs:
        try:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(JOIN_SECONDS)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass


class Runner:
    """Where a set of (point, seed) tasks runs, `irs[point]` with `seed`: this process (--jobs 1), a
    pool of worker processes, or a Ray cluster, connected to at the first set and kept for the next
    (a search, serq/exp/find.py, runs one set a step). The results: (point, seed) -> run_one's."""

    def __init__(self, cluster: str | None, jobs: int, jobs_given: bool, bar):
        self.cluster, self.jobs, self.jobs_given, self.bar = cluster, jobs, jobs_given, bar
        self.ray = None

    def run(self, irs, tasks, settings) -> dict:
        if self.cluster is not None:
            if self.ray is None:
                self.ray = _ray_start(self.cluster, self.jobs if self.jobs_given else None, self.bar)
            return _on_ray(self.ray, irs, tasks, settings, self.bar)
        if self.jobs == 1:
            return _in_process(irs, tasks, settings, self.bar)
        return _on_pool(self.jobs, irs, tasks, settings, self.bar)

    def close(self):
        if self.ray is not None:
            ray, self.ray = self.ray, None
            from serq.staged import deferred_signals
            with deferred_signals():  # a local instance stopped whole, whatever comes meanwhile
                ray.shutdown()


def _ray_start(address, jobs, bar):
    """Ray, connected to the cluster (or a local instance started); stopped again if that fails."""
    import logging
    import threading
    if address != "local":
        _reachable(address)  # before Ray's import, which takes seconds
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report sent anywhere
    # no stack dump on stderr when the sweep is ended by SIGTERM (Ray's C++ core worker handles it
    # with absl's failure handler otherwise: issue 50, item 2); read when Ray is imported
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    if address == "local":
        # one node: its servers on the loopback address, not the address Ray would find for other
        # nodes to reach (read when Ray is imported; despite its name it applies on Linux too)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise UsageError(f"--cluster needs Ray: {_EXTRA}") from None
    bar.say("starting a local Ray instance" if address == "local" else f"connecting to the Ray cluster at {address}")
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    # Ctrl-C inside ray.init leaves the processes it had started running, which ray.shutdown does
    # not find: it is held until the instance is up, then stops it whole. SIGTERM and SIGHUP likewise;
    # and Ray's own handler of SIGTERM (a SystemExit, and its C++ core worker's, which prints a stack
    # dump on stderr) is replaced by what was there before once it is up (issue 50, item 2)
    held: list = []
    saved = {}
    if threading.current_thread() is threading.main_thread():
        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *_TERM_SIGNALS)}
        for sig, handler in saved.items():
            if handler is not signal.SIG_IGN:
                signal.signal(sig, lambda signum, _: held.append(signum))
    # ray.init installs its own SIGTERM handler as it starts (a SystemExit), which would cut it short
    # with its processes running: left out, the signal held as the others are
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    own = getattr(utils, "set_sigterm_handler", None)
    if own is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        try:
            if address == "local":
                ray.init(num_cpus=jobs or os.cpu_count() or 1, **quiet)
            else:
                ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            hint = ""
            if address != "local" and not os.environ.get("RAY_AUTH_MODE"):
                hint = ("; a cluster with token authentication (Ray's default) needs RAY_AUTH_MODE=token and "
                        "its token (RAY_AUTH_TOKEN, or ~/.ray/auth_token) here")
            raise UsageError(f"--cluster {address}: cannot connect: {exc}{hint}") from None
        finally:
            if own is not None:
                utils.set_sigterm_handler = own
            for sig, handler in saved.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if held:
            from serq.staged import _raise
            _raise(held[0])
    except BaseException:
        ray.shutdown()
        raise
    bar.restart()  # the time left is the runs', not Ray's start-up
    return ray


def _on_ray(ray, irs, tasks, settings, bar) -> dict:
    """Each run a Ray task (retried by Ray when its worker dies), results as they finish."""
    task = ray.remote(max_retries=RETRIES, num_cpus=1)(_ray_task)
    traces = ray.put(_traces(irs))
    refs = [ray.put(ir) for ir in irs]
    pending = {task.remote(refs[p], settings, s, traces): (p, s) for p, s in tasks}
    results = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for r in ready:
            t = pending.pop(r)
            try:
                results[t] = ray.get(r)
            except ray.exceptions.RayError as exc:  # its worker died RETRIES + 1 times, or Ray failed
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                results[t] = _failed(f"the Ray task failed after {RETRIES} retries: {type(exc).__name__}"
                                     + (f": {why}" if why else ""))
            bar.tick()
    return results


def _reachable(address: str):
    """A cluster's address that takes no connection is refused at once: ray.init would wait on it
    for many minutes, deaf to Ctrl-C. ('auto' and an address without a port are left to Ray.)"""
    import socket
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, colon, port = hostport.rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise UsageError(f"--cluster {address}: nothing answers there ({exc.strerror or exc}); "
                         "`ray start --head` on the head node prints its address") from None


def _traces(irs) -> dict:
    """The trace files the programs read, path -> bytes: a Ray node need not have them."""
    from serq.ir import model as I
    out = {}
    for ir in irs:
        tr = I.Program.model_validate_json(ir).workload.trace
        if tr is not None and tr.file not in out:
            with open(tr.file, "rb") as fh:
                out[tr.file] = fh.read()
    return out


_COPIES: dict[str, str] = {}  # a Ray worker's trace copies: path on the driver -> path here


def _ray_task(ir_json, settings, seed, traces):
    if traces:
        from serq.ir import model as I
        prog = I.Program.model_validate_json(ir_json)
        tr = prog.workload.trace
        if tr is not None:
            here = _trace_here(tr.file, traces[tr.file])
            if here != tr.file:
                ir_json = prog.model_copy(update={"workload": prog.workload.model_copy(
                    update={"trace": tr.model_copy(update={"file": here})})}).model_dump_json()
    return run_one(ir_json, settings, seed)


def _trace_here(path: str, data: bytes) -> str:
    """The driver's path when this node holds the same bytes there, else a copy in a temporary file."""
    if path not in _COPIES:
        try:
            with open(path, "rb") as fh:
                same = fh.read() == data
        except OSError:
            same = False
        if same:
            _COPIES[path] = path
        else:
            d = tempfile.mkdtemp(prefix="serq-trace-")
            copy = os.path.join(d, hashlib.sha256(data).hexdigest()[:16] + "-" + os.path.basename(path))
            with open(copy, "wb") as fh:
                fh.write(data)
            _COPIES[path] = copy
    return _COPIES[path]


# ------------------------------------------------------------------ the tables

def _rows(points, names, tasks, results):
    """The rows sorted by (point, seed), and the columns: the leading ones, then the union of the
    runs' columns in first-seen order (the order of the sorted rows: the same whatever ran first)."""
    rows = []
    columns = ["point", *names, "seed", "status", "error"]
    seen = set(columns)
    for p, s in sorted(tasks):
        res = results[(p, s)]
        row = {"point": p, **{n: _plain(points[p][n]) for n in names}, "seed": s, "status": res["status"],
               "error": res.get("error")}
        for c, v in res.get("values", {}).items():
            row[c] = v
            if c not in seen:
                seen.add(c)
                columns.append(c)
        rows.append(row)
    return rows, columns


def _plain(v):
    """An input's value as written: a whole number as an integer."""
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < 2 ** 53:
        return int(v)
    return v


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)  # the shortest text that reads back as the same float
    return str(v)


def _json(v):
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):  # an input of inf: written as the IR writes it
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def _csv(columns, rows) -> str:
    import csv
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def statistics(rows, columns) -> list[str]:
    """summary.csv's `stat` names: the columns after `error` whose every value is a number (claim
    statuses are not)."""
    return [c for c in columns[columns.index("error") + 1:]
            if all(_number(r[c]) for r in rows if r.get(c) is not None)]


def _summary(rows, columns, names, t_ppf) -> str:
    """Long form: per grid point and numeric column, the mean across seeds and the Student-t 95%
    half-width of its interval (empty below two values)."""
    stats = statistics(rows, columns)
    import csv
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["point", *names, "stat", "n", "mean", "ci95", "lo", "hi"])
    for p, group in itertools.groupby(rows, key=lambda r: r["point"]):
        group = list(group)
        lead = [p, *(_cell(group[0][n]) for n in names)]
        for c in stats:
            n, mean, ci = interval([float(r[c]) for r in group if r.get(c) is not None], t_ppf)
            lo, hi = (mean - ci, mean + ci) if ci is not None else (None, None)
            w.writerow([*lead, c, n, _cell(mean), _cell(ci), _cell(lo), _cell(hi)])
    return buf.getvalue()


def interval(xs: list[float], t_ppf) -> tuple:
    """(n, the mean, the Student-t 95% half-width across them): None where there are too few."""
    n = len(xs)
    mean = ci = None
    if n:
        mean = mean_of(xs, n)  # fsum / n, total beyond the float range
        if n >= 2:
            sc, q = squares([x - mean for x in xs])
            sd = sc * math.sqrt(q / (n - 1))  # sc is 1.0 but beyond the float range
            ci = t_ppf(n - 1) * sd / math.sqrt(n)
    return n, mean, ci


class _Out(StagedDir):
    """The output directory, checked before any run (serq/staged.py): a path that is not a
    directory, or a directory holding anything but a previous sweep's files, is refused (a usage
    error), so that a mistyped --out cannot delete files. The tables are written into a staging
    directory beside it and renamed into place, so a sweep that fails or is interrupted leaves what
    was there before."""

    def __init__(self, path: str):
        super().__init__(path, "--out", "a sweep", _foreign)

    def write(self, files: dict[str, str]):
        """Each file whole into the staging directory (an OSError says why not), then all in place
        (serq/staged.py: files put at DIR meanwhile are left, the tables kept beside them)."""
        for name, text in files.items():
            self.put(name, text)
        self.commit()


def _foreign(target: str) -> str | None:
    return next((e.name for e in os.scandir(target) if not (e.name in FILES and e.is_file(follow_symlinks=False))),
                None)


# ------------------------------------------------------------------ what the user sees

class _Bar:
    """Runs done, elapsed and time left on stderr: a bar redrawn in place on a terminal (the style of
    `serq run`'s), a plain line at each tenth of the runs otherwise (a log), nothing with --quiet."""

    def __init__(self, total: int, quiet: bool):
        err = sys.stderr
        self.mode = None if quiet or err is None else ("tty" if err.isatty() else "lines")
        self.total, self.done, self.shown, self.last, self.width = total, 0, False, 0.0, 0
        self.restart()

    def restart(self):
        self.t0 = time.monotonic()
        self.step = 0
        self._draw(force=True)

    def say(self, text: str):
        if self.mode is not None:
            self._write(("\r" + " " * self.width + "\r" if self.shown else "") + f"serq sweep: {text}\n")
            self.shown = False

    def resize(self, total: int):
        """A search's runs are known a step ahead only: the total is its estimate, revised."""
        self.total = max(total, self.done)
        if self.done == self.total:  # a search that ended sooner than estimated: all done
            self._draw(force=True)

    def tick(self):
        self.done += 1
        self._draw(force=self.done == self.total)

    def _draw(self, force=False):
        if self.mode is None:
            return
        t = time.monotonic()
        el = t - self.t0
        left = el / self.done * (self.total - self.done) if self.done else None
        when = f"{_clock(el)} elapsed" + (f", {_clock(left)} left" if left is not None else "")
        if self.mode == "tty":
            if not force and t - self.last < 0.2:
                return
            self.last = t
            frac = self.done / self.total if self.total else 1.0
            line = f"[{'#' * int(frac * 30):<30}] {self.done}/{self.total} runs  {when}"
            self.width = max(self.width, len(line))  # a shorter line covers all of the last one
            self._write("\r" + line.ljust(self.width))
            self.shown = True
        else:
            step = self.done * 10 // self.total if self.total else 10
            if self.done and step > self.step:
                self.step = step
                self._write(f"serq sweep: {self.done}/{self.total} runs, {when}\n")

    def close(self):
        if self.mode == "tty" and self.shown:
            self._write("\r" + " " * self.width + "\r")
            self.shown = False

    def _write(self, text):
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            self.mode = None


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _tell_failures(rows, names, most=10):
    bad = [r for r in rows if r["status"] != "ok"]
    for r in bad[:most]:
        at = ", ".join(f"{n}={_cell(r[n])}" for n in names)
        _say(f"serq sweep: point {r['point']}{f' ({at})' if at else ''}, seed {r['seed']} failed: {r['error']}")
    if len(bad) > most:
        _say(f"serq sweep: and {len(bad) - most} more failed runs (runs.csv, its error column)")


def _say(text):
    from serq.cli import _say as say
    say(text)


def _print(text):
    from serq.cli import _out
    _out(text)
