"""`serq check` on long programs: CPU time to parse, lower and link programs of N, 2N, 4N and 8N
units, for each family of statements, with the cost per statement and the growth ratio between
sizes (2 for linear). A unit is a few statements in the reference's style, on the engine of
examples/multi-turn/vllm.sq; `program(family, n)` writes one (tests/test_link_speed.py uses it).

    .venv/bin/python bench/link.py [N]      # N = 25 by default
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

with open(os.path.join(HERE, "..", "examples", "multi-turn", "vllm.sq"), encoding="utf-8") as _fh:
    VLLM = _fh.read()
_SERVER = "    vllm (prompt, o);                                 // the engine's request\n"
assert _SERVER in VLLM

# per unit i: declarations before the workload, statements in the server, items after it
FAMILIES = {
    # long straight-line bodies, branches and loops that let time pass
    "server": ("  stage s{i} : ps(1);\n",
               "    set x{i} = prompt + {i};\n"
               "    observe ob{i} = x{i} * 2 + n;\n"
               "    branch (x{i} > 500) {{ run s{i} (cost(s{i}, 0.001)); set y = x{i}; }}\n"
               "    else {{ set y = 1; run s{i} (cost(s{i}, 0.002)); }}\n"
               "    set w{i} = 0;\n"
               "    while (w{i} < 2) {{ run s{i} (cost(s{i}, 0.001)); set w{i} = w{i} + 1; }}\n",
               ""),
    # the engine's request, called again and again
    "calls": ("",
              "    vllm (prompt, o);\n",
              ""),
    # pools, stages, definitions and gauges, each used once in the server
    "decls": ("  stage q{i} : fifo;\n"
              "  pool p{i} {{ cap 100; queue fifo; }}\n"
              "  def f{i}(x) {{ x * {i} + 1 }}\n"
              "  def b{i}(x) {{ run q{i} (cost(q{i}, x)); }}\n",
              "    hold p{i} (cost(p{i}, 1)) {{ b{i}(f{i}(0.0001)); }}\n",
              "  gauge g{i} = queue(q{i}) + used(p{i});\n"),
}
FAMILIES["mixed"] = tuple("".join(f[k] for f in FAMILIES.values()) for k in range(3))


def program(family: str, n: int) -> str:
    """examples/multi-turn/vllm.sq with n units of the family (its server's call kept first)."""
    decl, stmt, tail = FAMILIES[family]
    text = VLLM.replace("  workload {", "".join(decl.format(i=i) for i in range(n)) + "\n  workload {", 1)
    text = text.replace(_SERVER, "    vllm (prompt, o);\n" + "".join(stmt.format(i=i) for i in range(n)), 1)
    return text.replace("  gauge kv_used", "".join(tail.format(i=i) for i in range(n)) + "  gauge kv_used", 1)


def statements(text: str) -> int:
    """Statements and items, counted as the `;` and `{` that end or open them."""
    return len(re.findall(r"[;{]", re.sub(r"//[^\n]*", "", text)))


def check_cpu(text: str) -> float:
    """CPU seconds of this process (the linker runs in a thread of it) to check the text."""
    from serq import api
    t = time.process_time()
    api.load_text(text, "bench.sq")
    return time.process_time() - t


def measure(family: str, sizes, rounds: int = 3) -> dict:
    """Median CPU seconds per size, the rounds interleaved across sizes."""
    texts = {n: program(family, n) for n in sizes}
    times: dict = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            times[n].append(check_cpu(texts[n]))
    return {n: statistics.median(times[n]) for n in sizes}


def main(base: int) -> None:
    check_cpu(program("mixed", 1))  # the grammar and models, built once, outside the figures
    sizes = [base, 2 * base, 4 * base, 8 * base]
    print(f"serq check, CPU ms (median of 3); per statement at the largest size; growth: time(2n)/time(n)")
    for family in FAMILIES:
        med = measure(family, sizes)
        top = program(family, sizes[-1])
        grow = [med[b] / med[a] for a, b in zip(sizes, sizes[1:])]
        row = "  ".join(f"{n}: {med[n] * 1000:7.0f}" for n in sizes)
        print(f"{family:>6}  {row}  | {med[sizes[-1]] * 1000 / statements(top):5.2f} ms/stmt "
              f"({len(top) // 1000} KB)  growth " + " ".join(f"{g:.2f}" for g in grow))
    # the figure: a program of about 20 KB
    n = 1
    while len(program("mixed", n)) < 20_000:
        n += 1
    text = program("mixed", n)
    print(f"mixed program of {len(text) / 1000:.1f} KB ({statements(text)} statements): "
          f"{measure('mixed', [n], rounds=1)[n]:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 25)
