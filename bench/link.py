"""`serq check` on long programs: CPU time to parse, lower and link programs of N, 2N, 4N and 8N
units, for each family of statements, with the cost per statement and the growth between sizes
(2 for linear). A unit is a few statements in the reference's style, on the engine of
examples/multi-turn/vllm.sq; `program(family, n)` writes one (tests/test_link_speed.py uses it).

    .venv/bin/python bench/link.py [N]      # N = 25 by default
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

with open(os.path.join(HERE, "..", "examples", "multi-turn", "vllm.sq"), encoding="utf-8") as _fh:
    VLLM = _fh.read()
_SERVER = "    vllm (prompt, o);                                 // the engine's request\n"
assert _SERVER in VLLM


@dataclass(frozen=True)
class Family:
    """Per unit i: `decl` before the workload, `stmt` in the server, `tail` after it; `once`
    declared once; `close` written after all the units, innermost first (units that nest)."""
    decl: str = ""
    stmt: str = ""
    tail: str = ""
    once: str = ""
    close: str = ""


FAMILIES = {
    # long straight-line bodies, branches and loops that let time pass
    "server": Family(decl="  stage s{i} : ps(1);\n",
                     stmt="    set x{i} = prompt + {i};\n"
                          "    observe ob{i} = x{i} * 2 + n;\n"
                          "    branch (x{i} > 500) {{ run s{i} (cost(s{i}, 0.001)); set y = x{i}; }}\n"
                          "    else {{ set y = 1; run s{i} (cost(s{i}, 0.002)); }}\n"
                          "    set w{i} = 0;\n"
                          "    while (w{i} < 2) {{ run s{i} (cost(s{i}, 0.001)); set w{i} = w{i} + 1; }}\n"),
    # the engine's request, called again and again
    "calls": Family(stmt="    vllm (prompt, o);\n"),
    # pools, stages, definitions and gauges, each used once in the server
    "decls": Family(decl="  stage q{i} : fifo;\n"
                         "  pool p{i} {{ cap 100; queue fifo; }}\n"
                         "  def f{i}(x) {{ x * {i} + 1 }}\n"
                         "  def b{i}(x) {{ run q{i} (cost(q{i}, x)); }}\n",
                    stmt="    hold p{i} (cost(p{i}, 1)) {{ b{i}(f{i}(0.0001)); }}\n",
                    tail="  gauge g{i} = queue(q{i}) + used(p{i});\n"),
    # the serving vocabulary: leases released by transfers, tools among many stages
    "serving": Family(once="  stage link : ps(1);\n  stage tool : delay;\n  pool kvd { cap 100000; }\n",
                      decl="  pool m{i} {{ cap 100; }}\n  stage t{i} : delay;\n",
                      stmt="    hold m{i} (cost(m{i}, 10)) {{ run t{i} (cost(t{i}, 0.01)); }} lease m{i} (inf);\n"
                           "    hold kvd (cost(kvd, 10)) {{ transfer (10) from m{i} to kvd (10); }}\n"
                           "    tool (0.01);\n"),
}
FAMILIES["mixed"] = Family(**{k: "".join(getattr(f, k) for f in FAMILIES.values())
                              for k in ("decl", "stmt", "tail", "once", "close")})
# loops in loops, each reading a hidden attribute (not in the sweep: brackets nest at most 100 deep)
NESTED = Family(once="  stage s0 : ps(1);\n",
                stmt="    set a{i} = o;\n    loop {{\n",
                close="    run s0 (cost(s0, a{i}));\n    }}\n")


def program(family: str | Family, n: int) -> str:
    """examples/multi-turn/vllm.sq with n units of the family (its server's call kept first)."""
    f = FAMILIES[family] if isinstance(family, str) else family
    decls = f.once + "".join(f.decl.format(i=i) for i in range(n))
    text = VLLM.replace("  workload {", decls + "\n  workload {", 1)
    body = "".join(f.stmt.format(i=i) for i in range(n)) + "".join(f.close.format(i=i) for i in reversed(range(n)))
    text = text.replace(_SERVER, "    vllm (prompt, o);\n" + body, 1)
    return text.replace("  gauge kv_used", "".join(f.tail.format(i=i) for i in range(n)) + "  gauge kv_used", 1)


def statements(text: str) -> int:
    """Statements and items, counted as the `;` and `{` that end or open them."""
    return len(re.findall(r"[;{]", re.sub(r"//[^\n]*", "", text)))


def check_cpu(text: str) -> float:
    """CPU seconds of this process (the linker runs in a thread of it) to check the text."""
    from serq import api
    t = time.process_time()
    api.load_text(text, "bench.sq")
    return time.process_time() - t


def measure(family, sizes, rounds: int = 3) -> dict:
    """Median CPU seconds per size, the rounds interleaved across sizes."""
    texts = {n: program(family, n) for n in sizes}
    times: dict = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            times[n].append(check_cpu(texts[n]))
    return {n: statistics.median(times[n]) for n in sizes}


def _row(name, family, sizes):
    med = measure(family, sizes)
    top = program(family, sizes[-1])
    grow = [med[b] / med[a] for a, b in zip(sizes, sizes[1:])]
    row = "  ".join(f"{n}: {med[n] * 1000:6.0f}" for n in sizes)
    print(f"{name:>7}  {row}  | {med[sizes[-1]] * 1000 / statements(top):5.2f} ms/stmt "
          f"({len(top) // 1000} KB)  growth " + " ".join(f"{g:.2f}" for g in grow))


def main(base: int) -> None:
    check_cpu(program("mixed", 1))  # the grammar and models, built once, outside the figures
    print("serq check, CPU ms (median of 3); per statement at the largest size; growth: time(2n)/time(n)")
    for family in FAMILIES:
        _row(family, family, [base, 2 * base, 4 * base, 8 * base])
    _row("nested", NESTED, [5, 10, 20, 40])
    n = 1  # the figure: a program of about 20 KB
    while len(program("mixed", n)) < 20_000:
        n += 1
    text = program("mixed", n)
    print(f"mixed program of {len(text) / 1000:.1f} KB ({statements(text)} statements): "
          f"{measure('mixed', [n])[n]:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 25)
