"""Fuzz cases for serQ: programs, run settings and IR files carrying the values that break things.

A case is plain JSON data (a dict), so the same case runs in a test, in `tools/fuzz.py`'s
campaign and as a saved reproducer:

    {"target": "check" | "run" | "ir",
     "seed": name of the seed program, "program": its text after mutation,
     "files": {name: text} beside it (a trace), "argv": extra `serq run` arguments,
     "ir": [[leaf, op, value], ...]  (target "ir": mutations of the program's `serq ir` JSON)}

Every generator draws through a `Draw` (`RandomDraw` for the campaign, `HypoDraw` inside a
Hypothesis test), so a case is reproducible from a seed and Hypothesis can shrink it. What the
generators may produce is a `Gen` profile: its switches name the classes of value (`SUITE` is what
`make test` runs; `FULL` what the campaign runs). `tests/fuzzrun.py` runs a case and judges it.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import random
import re

from data.reference_snippets import SNIPPETS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------------------------------------- draws
class RandomDraw:
    """Draws from a seeded random.Random (the campaign)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class HypoDraw:
    """Draws through Hypothesis (a composite's `draw`): a case shrinks towards first elements, low integers."""

    def __init__(self, draw):
        from hypothesis import strategies as st
        self.draw, self.st = draw, st

    def choice(self, seq):
        return self.draw(self.st.sampled_from(seq))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))


# -------------------------------------------------------------------------------------------- profile
@dataclasses.dataclass(frozen=True)
class Gen:
    """Which classes of value a generator may produce. Each switch is one family of failures."""
    structural: bool = True     # swap, duplicate and delete lines
    negative: bool = True       # -1, -0.5 for any number
    fractional: bool = True     # 0.5, 2.5 where a whole number is meant
    tiny: bool = True           # 1e-300, 5e-324, 1e-9: gaps and means that never finish (item 9): serQ
                                # must say so (its slow-run note; tools/fuzz.py counts a slow program)
    huge: bool = True           # 1e12, 1e308: rates, phases, sizes that never finish (item 9)
    inf_literal: bool = True    # `inf`, `1e309` written where a number goes (items 7, 9)
    nan_arith: bool = True      # NaN made by arithmetic at link time: 0/0, z/z with `let z = 0` (item 2)
    inf_arith: bool = True      # infinities made by arithmetic: 1/0, 1e308 * 10 (items 3, 7)
    drawn_nan: bool = True      # x / x with x drawn 0 at run time (item 2)
    long_runs: bool = True      # horizons 30x a seed's base, thousands of arrivals (item 1)
    flows: bool = True          # run and ir cases of the seeds with flows, transfers, pull/push (item 1)
    bad_settings: bool = True   # --seed/--horizon/--arrivals/--warmup out of range (items 7, 9, 11)
    ir_numbers: bool = True     # an IR file's numbers changed: the IR's rules re-checked on reading it (item 9)
    ir_nonfinite: bool = True   # Infinity and NaN written into an IR file
    ir_structural: bool = True  # IR fields deleted, retyped, strings swapped, list items duplicated
    ir_exprs: bool = True       # an IR expression replaced by an observable of one of its pools or stages,
                                # an engine value, a register or a context variable (each in every place)
    max_mutations: int = 3


FULL = Gen()
# What `make test` runs: every class of value (issue 7's fixes are in); a switch goes off here only
# while a known failure of its class is being fixed, and says so
SUITE = Gen()


# --------------------------------------------------------------------------------------------- seeds
_COMMENT = re.compile(r"//[^\n]*")


@dataclasses.dataclass(frozen=True)
class Seed:
    name: str
    text: str
    files: tuple = ()           # ((name, text), ...) beside the program
    horizon: float = 0.0        # a horizon that runs in well under a second; 0: check only
    cheap: bool = False         # a run 30 times as long, or of thousands of arrivals, takes seconds at most


_TRACE = re.compile(r'\btrace\s+"([^"]+)"')


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


# the base horizons: each seed's ordinary run at this horizon takes a fraction of a second, and ten
# times as long takes under two seconds (measured with the worker of tests/fuzzrun.py)
_HORIZONS = {"mg1": 200, "ps": 200, "closed": 100, "vllm": 40, "vllm_chat": 40, "vllm_single_turn": 20,
             "vllm_subagents": 40, "vllm_replay": 30, "vllm_request": 30, "vllm_shared": 30, "vllm_chat_shared": 40,
             "llmd_nixl_pull": 10,
             "flows": 10, "pull": 20, "push": 20, "legs": 50, "pool": 20, "engine": 20, "choose": 50,
             "batch": 20, "sglang": 10, "tgi": 10, "tensorrt_llm": 10, "vllm_nixl_push": 10, "gpu_testbeds": 30}
# the seeds whose sessions cost little (the engines' do not): flows among them, whose long runs
# are what item 1 of issue 7 is about
_CHEAP = {"mg1", "ps", "closed", "vllm_request", "vllm_shared", "flows", "pull", "push", "legs", "pool", "choose", "batch"}


def _seeds() -> list[Seed]:
    out = []
    paths = sorted([q for q in glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q])
    for p in paths:
        d = os.path.dirname(p)
        files = {os.path.basename(c): _read(c) for c in sorted(glob.glob(os.path.join(d, "*.csv")))}
        text = _COMMENT.sub("", _read(p))
        # a trace of another folder (examples/replay/trace.csv) goes beside the case, by its name
        for rel in _TRACE.findall(text):
            files.setdefault(os.path.basename(rel), _read(os.path.join(d, rel)))
        text = _TRACE.sub(lambda m: f'trace "{os.path.basename(m.group(1))}"', text)
        name = os.path.splitext(os.path.basename(p))[0]
        out.append(Seed("examples/" + os.path.relpath(p, os.path.join(ROOT, "examples")),
                        text, tuple(sorted(files.items())), _HORIZONS.get(name, 20), name in _CHEAP))
    for p in sorted(glob.glob(os.path.join(HERE, "data", "fuzz", "*.sq"))):
        name = os.path.splitext(os.path.basename(p))[0]
        out.append(Seed("fuzz/" + name, _COMMENT.sub("", _read(p)), (), _HORIZONS.get(name, 20), name in _CHEAP))
    # the reference's snippets: what links is checked like any program; most stop at a name
    for i, (sec, prod, text) in enumerate(SNIPPETS):
        if prod == "items":
            out.append(Seed(f"snippet/{i}", "fn main() {" + text + "}"))
        elif prod == "program":
            out.append(Seed(f"snippet/{i}", text))
    return out


SEEDS = _seeds()
RUNNABLE = [s for s in SEEDS if s.horizon]
_FLOWS = re.compile(r"\b(pull|push|transfer)\b|\brun \w+(\[\w+\])?\s*,")
WITHOUT_FLOWS = [s for s in RUNNABLE if not _FLOWS.search(s.text)]
BY_NAME = {s.name: s for s in SEEDS}
WITH_CLAIMS = [s for s in RUNNABLE if re.search(r"\bclaim\b", s.text)]   # what `serq verify` decides


# ------------------------------------------------------------------------------------ value classes
def values(g: Gen) -> list[str]:
    """Text that replaces a number in a program, benign first (Hypothesis shrinks to the front)."""
    v = ["1", "0", "2", "3", "16", "100", "1000"]
    if g.fractional:
        v += ["0.5", "2.5", "1.000001"]
    if g.negative:
        v += ["-1", "-0.5", "(0 - 3)"]
    if g.tiny:
        v += ["1e-300", "5e-324", "1e-9", "(1e-300 * 1e-300)"]
    if g.huge:
        v += ["1e12", "1e308", "1e9", "4294967297"]
    if g.inf_literal:
        v += ["inf", "1e309", "(0 - inf)", "1e400"]
    if g.nan_arith:
        v += ["(0 / 0)", "(fz_ / fz_)", "(inf - inf)", "(0 * inf)"]
    if g.inf_arith:
        v += ["(1 / 0)", "(0 - 1 / 0)", "(1e308 * 10)", "(fz_ + 1) / fz_"]
    if g.drawn_nan:
        v += ["(floor(~uniform(0, 0.5)) / floor(~uniform(0, 0.5)))", "(~det(0) / ~det(0))",
              "(1 / floor(~uniform(0, 0.5)))"]
    return v


def ir_values(g: Gen) -> list:
    """Numbers written into an IR file's numeric fields."""
    v: list = [0, 1, 2, 0.5, 1000]
    if g.negative:
        v += [-1, -0.5]
    if g.tiny:
        v += [1e-300, 5e-324]
    if g.huge:
        v += [1e12, 1e308, 2 ** 63]
    if g.ir_nonfinite:
        v += [float("inf"), float("-inf"), float("nan")]
    return v


# a number in a program's text: not part of a name, a field (`.5`), a string or an exponent
_NUMBER = re.compile(r'(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])')
_STRING = re.compile(r'"[^"\n]*"')


def numbers(text: str) -> list[tuple[int, int]]:
    """The spans of the numbers of a program, outside strings."""
    strings = [m.span() for m in _STRING.finditer(text)]
    return [m.span() for m in _NUMBER.finditer(text)
            if not any(a <= m.start() < b for a, b in strings)]


def _needs_zero(text: str) -> str:
    """`fz_` is a constant 0 declared at the top of `main`: a NaN made of names, not literals."""
    if "fz_" not in text or "let fz_" in text:
        return text
    return text.replace("fn main() {", "fn main() {\n  let fz_ = 0;", 1)


def mutate_program(d, g: Gen, text: str, numbers_per_line_change: int = 1) -> tuple[str, list[str]]:
    """Up to g.max_mutations changes: a number replaced, or a line swapped, duplicated or deleted.
    A line change is drawn once for every `numbers_per_line_change` number changes (0: none; a program
    to run should mostly still link). Returns the text and a short description of each change."""
    ops = ["number"] * max(1, numbers_per_line_change)
    if g.structural and numbers_per_line_change:
        ops += ["swap", "dup", "delete"]
    vals = values(g)
    done = []
    for _ in range(d.integer(0, g.max_mutations)):
        op = d.choice(ops)
        if op == "number":
            spans = numbers(text)
            if not spans:
                continue
            a, b = spans[d.integer(0, len(spans) - 1)]
            v = d.choice(vals)
            done.append(f"{text[a:b]} -> {v}")
            text = text[:a] + v + text[b:]
        else:
            lines = text.split("\n")
            i = d.integer(0, len(lines) - 1)
            if op == "delete":
                done.append(f"delete line {i + 1}")
                del lines[i]
            elif op == "dup":
                done.append(f"duplicate line {i + 1}")
                lines.insert(i, lines[i])
            else:
                j = d.integer(0, len(lines) - 1)
                done.append(f"swap lines {i + 1}, {j + 1}")
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return _needs_zero(text), done


def run_argv(d, g: Gen, seed: Seed) -> list[str]:
    """`serq run` settings: a horizon around the seed's base; or a number of arrivals, with a horizon
    or without one; or none (a batch or closed workload ends, or it is a usage error); a seed."""
    h = seed.horizon
    horizons = [h, h / 10, h / 2]
    counts = [5, 1, 20]
    if g.long_runs:
        horizons += [h * 10] + ([h * 30] if seed.cheap else [])
        counts += [200] + ([2000, 5000] if seed.cheap else [])
    argv = []
    if g.bad_settings and d.integer(0, 7) == 0:
        flag = d.choice(["--seed", "--horizon", "--arrivals", "--warmup"])
        argv += [flag, d.choice(["inf", "1e400", "-1", "0", "nan", "1e-300", "0.5", "1e12", "-inf"])]
    kind = d.integer(0, 5)
    if kind == 3:  # a number of arrivals, bounded by a horizon
        argv += ["--arrivals", str(d.choice(counts)), "--horizon", repr(max(horizons) * 20)]
    elif kind == 4:  # arrivals alone: the run ends when they have drained
        argv += ["--arrivals", str(d.choice(counts[:3]))]
    elif kind == 5:  # no horizon, no arrivals
        pass
    else:
        argv += ["--horizon", repr(d.choice(horizons))]
    if d.integer(0, 3) == 0:
        argv += ["--warmup", repr(h / 20)]
    argv += ["--seed", str(d.integer(1, 50))]
    if d.integer(0, 1):
        argv.append("--json")
    return argv


def ir_mutations(d, g: Gen) -> list[list]:
    """Changes to an IR file, applied by tests/fuzzrun.apply_ir: [leaf index, op, value]. A leaf is
    counted among the IR's numbers (op "num") or all its leaves (the structural ops). None when both
    families are off: the case is then `serq ir`, its output read back, and run."""
    ops = (["num"] if g.ir_numbers else []) + (["del", "retype", "str", "dup"] if g.ir_structural else []) + \
        (["expr"] if g.ir_exprs else [])
    if not ops:
        return []
    vals = ir_values(g)
    out = []
    for _ in range(d.integer(1, g.max_mutations)):
        op = d.choice(ops)
        leaf = d.integer(0, 10 ** 6)
        if op == "num":
            out.append([leaf, op, d.choice(vals)])
        elif op == "retype":
            out.append([leaf, op, d.choice(["x", None, [], {}, True, 1])])
        else:
            out.append([leaf, op, d.integer(0, 10 ** 6)])
    return out


def case(d, g: Gen, target: str | None = None) -> dict:
    """One case: a seed program, mutated; for "run" and "ir" a seed that runs."""
    target = target or d.choice(["check", "run", "ir"])   # "verify" only when asked for
    seed = d.choice(SEEDS if target == "check" else WITH_CLAIMS if target == "verify"
                    else RUNNABLE if g.flows else WITHOUT_FLOWS)
    text, changes = mutate_program(d, g, seed.text, {"check": 1, "run": 9, "ir": 0, "verify": 9}[target])
    c = {"target": target, "seed": seed.name, "changes": changes, "program": text,
         "files": dict(seed.files), "argv": []}
    if target == "run":
        c["argv"] = run_argv(d, g, seed)
    elif target == "verify":   # a small bound: every verdict's workload is replayed by the interpreter
        c["argv"] = ["--sessions", str(d.integer(1, 2)), "--values", str(d.integer(1, 3)), "--timeout", "3", "--json"]
    elif target == "ir":
        c["ir"] = ir_mutations(d, g)
        c["argv"] = ["--horizon", repr(seed.horizon / 2), "--seed", str(d.integer(1, 50)), "--json"]
    return c


def strategy(g: Gen, target: str | None = None):
    """The Hypothesis strategy of cases."""
    from hypothesis import strategies as st

    @st.composite
    def cases(draw):
        return case(HypoDraw(draw), g, target)
    return cases()


def random_case(seed: str, g: Gen = FULL, target: str | None = None) -> dict:
    """The campaign's case number `seed` (a string such as "1:417"): the same case every time."""
    return case(RandomDraw(random.Random(seed)), g, target)
