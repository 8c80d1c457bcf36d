"""Programs of the Lean fragment and their workloads, generated from a few numbers and choices
(Hypothesis draws them in tests/test_ref_differential.py): one vLLM-like engine on the step clock
whose request, schedule, pools and workload vary over every form docs/lean.md lists, its KV cache
per session or keyed by content and shared across sessions (docs/reference/content.md)."""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

from hypothesis import strategies as st

ORDERS = ("", " decode first", " by (remaining)", " by (decoding, remaining)")
# iteration costs: on the step clock, in decimal seconds (vLLM's fits), with a quotient; each with
# the least an iteration lasts (a run that never drains is cut at so many iterations: HORIZON)
COSTS = {"1": 1, "2": 2, "1 + batch.decoding": 1, "1 + floor(batch.tokens / 16)": 1,
         "0.001 + 0.00004 * batch.tokens": 0.001, "0.25 + batch.tokens / 8": 0.25, "1.5": 1.5}
ITERATIONS = 3000
TOOLS = ("", "", "delay", "ps(1)", "ps(min(present, 2))", "ps(0.5 + present / 4)")
# the victim of a growth that does not fit: lifo, SGLang's retraction, the most tokens left, the
# least computed (each a key the reference names: decoding, position, remaining, admission)
VICTIMS = ("", "", "(1 - decoding, position - prompt, -prompt) requeue tail", "(-remaining, admission)",
           "(position) requeue head")
SCHEDULES = ("vllm", "ungated", "exclusive", "only", "branch", "half")
EACH = ("none", "const", "threshold")
# with prefix caching on a pool of blocks, what the KV cache is keyed by: the session ("": per
# session), or content (`cache content`), each conversation a stream that begins with a system
# prompt ("sys"), the trace's content columns ("trace": a session's prompt shares a prefix with an
# earlier session's), or two sessions of one stream each ("same": identical prompts, whose blocks
# are computed twice when both run at once and kept twice)
CONTENTS = ("", "sys", "trace", "same")


@dataclass(frozen=True)
class Case:
    bs: int            # the KV pool's block (0: none)
    blocks: int        # the KV pool's cap in blocks (in tokens when bs is 0)
    seqs: int          # the request slots
    budget: int        # tokens cap
    each: str
    cap: int           # the chunk cap's constant
    granule: int       # 0: none
    order: str
    schedule: str
    lifo: bool
    prefix: bool
    chunked: bool      # admission takes the first chunk (else every known token at once)
    reserve: bool      # reserve (known)
    cost: str
    arrive: str        # batch | renewal | poisson (the arrival times are `times`)
    gap: object        # renewal's gap: a whole number, or a decimal (2.5)
    sessions: tuple    # per session, its turns: (new, out, think)
    fifo: bool = False  # the request queue is fifo (else by (submitted, serial), vLLM's)
    iter_claims: bool = True  # claims over iterations (none: the interpreter may fast-forward steady decoding)
    times: tuple = ()  # under poisson, each session's arrival time: real times, written as decimals
    tool: str = ""     # a stage a session runs a tool call on before each next turn ("": none)
    victim: str = ""   # with lifo, `preempt by (...)` in place of `preempt lifo` ("": lifo itself)
    held: bool = False  # `reserve held`: a hold's unallocated reservation counts against later ones
    content: str = ""  # one of CONTENTS (with prefix caching and a block only)
    sys: int = 0       # "sys": the system prompt's tokens
    shares: tuple = ()  # "trace": per session (the earlier session whose stream it begins with, -1 none; tokens)

    @property
    def keyed(self) -> bool:
        """Whether the KV pool's cache is keyed by content (`cache content`)."""
        return bool(self.content) and self.prefix and self.bs > 0

    @property
    def n(self) -> int:
        return len(self.sessions)

    @property
    def population(self) -> int:
        """Under closed: the sessions at 0; each later one comes as one ends."""
        return min(2, self.n)

    @property
    def horizon(self) -> float:
        """Where a run that does not drain is cut: ITERATIONS of the shortest iteration, after the
        last arrival."""
        return ITERATIONS * COSTS[self.cost] + (max(self.times) if self.times else 0) + \
            (self.n * float(self.gap) if self.arrive == "renewal" else 0)


def text(c: Case) -> str:
    """The program's text."""
    bsr = c.bs if c.bs else 1
    cap = c.blocks * (c.bs if c.bs else 1)
    each = {"none": "", "const": f" each at most ({c.cap})", "threshold": " each at most (threshold)"}[c.each]
    let = f"let threshold = running.count + waiting.count > 1 ? {c.cap} : inf;\n    " if c.each == "threshold" else ""
    units = "min(known, reused + budget_left(llm))" if c.chunked else "known"
    taking = f"taking reqs (1), kv ({units})" + (" reserve (known)" if c.reserve else "") + \
        (" reuse (reused)" if c.prefix else "")
    admit = f"admit waiting while (running.preempted == 0){each} {taking};"
    if c.schedule == "vllm":
        sched = f"advance running{c.order}{each};\n    {admit}"
    elif c.schedule == "ungated":
        sched = f"advance running{c.order}{each};\n    admit waiting{each} {taking};"
    elif c.schedule == "exclusive":
        sched = f"exclusive prefill{each};\n    {admit}"
    elif c.schedule == "only":
        sched = (f"advance running only (in_phase()){c.order}{each};\n    "
                 f"admit waiting only (in_phase()) while (running.preempted == 0){each} {taking};")
    elif c.schedule == "half":  # admissions while the batch so far is under half the budget
        sched = (f"advance running{c.order}{each};\n    "
                 f"admit waiting while (batch.tokens < {max(1, c.budget // 2)}){each} {taking};")
    else:
        sched = (f"branch (flip == 0) {{ advance running{c.order}{each}; {admit} set flip = 1; }}\n    "
                 f"else {{ {admit} advance running{c.order}{each}; set flip = 0; }}")
    reused = f"min(cachedin(kv), reusable(known, {bsr}))" if c.prefix else "0"
    hit = "cached" if c.prefix else "0"
    cache = "      cache (prompt + o - 1);\n" if c.prefix else ""
    params, args = "prompt, o", "prompt, out"
    if c.keyed:  # the content a request's tokens are: its session's stream (docs/reference/content.md)
        cache = "      cache (prompt + o - 1) content (key, par, at);\n"
        params += ", key, par, at"
        args += {"sys": f", 1 + serial, 0, {c.sys}", "trace": ", stream, parent, common",
                 "same": ", serial % 2, 0, 0"}[c.content]
    arrive = {"batch": f"arrive batch({c.n});", "renewal": f"arrive renewal({c.gap});",
              "poisson": "arrive poisson(1);", "closed": f"arrive closed({c.population});"}[c.arrive]
    preempt = ("preempt none;" if not c.lifo else f"preempt by {c.victim};" if c.victim else "preempt lifo;")
    # a tool call between turns on a ps or delay stage, its work a quotient (docs/lean.md: JobS)
    stage = f"stage tool : {c.tool};\n  " if c.tool else ""
    tool = "run tool (cost(tool, (out + 1) / 2));" if c.tool else ""
    nreq = sum(len(s) for s in c.sessions)
    return f"""fn main() {{
  def in_phase() {{ running.decoding > 0 ? decoding : !decoding }}
  device gpu {{ kv cap {cap}; }}
  engine llm on gpu {{
    reqs cap {c.seqs};
    tokens cap {c.budget};
    {f"granule {c.granule};" if c.granule else ""}
    state flip = 0;
    request ({params}) {{
      set kept = prompt;
      set first = 0;
      set attempts = 0;
      at admission {{
        known = max(kept, computed + 1);
        reused = {reused};
      }}
      set kept = known;
      set attempts = attempts + 1;
      set c = {hit};
      branch (attempts == 1) {{ observe first_hit = c; }}
      prefill (known - c) growing kv;
      branch (first == 0) {{ set first = now; observe first_token = now; }}
      decode (o - 1 - (known - prompt)) growing kv;
      observe last_token = now;
      observe preemptions = attempts - 1;
      observe lag = (first - known) / 3 - prompt / 7;   // their mean is never -1.54321 (5^5 divides no denominator): no tie a float could round
{cache}    }}
    schedule {{
    {let}{sched}
    }}
    execute ({c.cost});
  }}
  pool kv on gpu {{ {f"block {c.bs};" if c.bs else ""} evict lru; {preempt}{" reserve held;" if c.held else ""}{" cache content;" if c.keyed else ""} }}
  pool reqs on llm {{ {"queue fifo;" if c.fifo else "queue by (submitted, serial);"} }}
  {stage}workload {{
    {arrive}
    trace "trace.csv" ordered;
    hidden out;
    init {{ set context = 0; set lim = serial; }}
    session {{ turn; while (more) {{ set context = prompt + out; {tool} turn; }} }}
  }}
  server {{
    set submitted = now;
    set prompt = context + new;
    llm ({args});
  }}
{iter_claims(c) if c.iter_claims else ""}  claim all_done: at end (count(last_token) == {nreq});
  claim short: at end (prefix_total(last_token) <= {nreq * nreq * 40});
  claim mean_lag: at end (total(lag) / max(1, count(lag)) <= -1.54321);
  claim client: at end (count(response) == {nreq} && largest(ttft) <= largest(response) && total(response) <= {nreq * 25});
}}
"""


def iter_claims(c: Case) -> str:
    return f"""  claim work_conserving: every iteration of llm (demand < {c.budget} || tokens == {c.budget});
  claim full: some iteration of llm (residents >= {c.seqs});
  claim small_batches: every iteration of llm (tokens <= {max(1, c.budget // 2)});
  claim early given (lim < 2): some iteration of llm (kv_prefill > 0 && decoders > 0);
"""


def write(c: Case, folder: str, claims: str = "") -> str:
    """The program, with `claims` (lines of claims) added at its end, and its trace in folder; the
    program's path."""
    path = os.path.join(folder, "prog.sq")
    prog = text(c)
    i = prog.rindex("}")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(prog[:i] + claims + prog[i:])
    with open(os.path.join(folder, "trace.csv"), "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        content = c.keyed and c.content == "trace"
        w.writerow(["session", "turn", "new", "out", "think"] + (["stream", "parent", "common"] if content else []))
        for i, turns in enumerate(c.sessions):
            for j, (new, out, think) in enumerate(turns):
                row = [f"s{i}", j, new, out, think]
                if content:  # session i's stream is i + 1; its first tokens another's, or its own
                    k, common = c.shares[i] if i < len(c.shares) else (-1, 0)
                    row += [i + 1, k + 1 if k >= 0 else 0, common if k >= 0 else 0]
                w.writerow(row)
    return path


@st.composite
def cases(draw) -> Case:
    bs = draw(st.sampled_from((0, 1, 2, 4, 8, 16)))
    sessions = draw(st.lists(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 6)),
                                      min_size=1, max_size=3), min_size=1, max_size=4))
    sessions = tuple(tuple((new, out, think if j else 0) for j, (new, out, think) in enumerate(s))
                     for s in sessions)
    longest = max(sum(n + o for n, o, _ in s) for s in sessions)
    unit = bs if bs else 1
    # mostly room for the longest conversation, sometimes less (a request refused or stuck)
    need = math.ceil(longest / unit) + 1
    blocks = draw(st.one_of(st.integers(need, need + 40), st.integers(2, max(2, need))))
    arrive = draw(st.sampled_from(("batch", "batch", "renewal", "poisson", "closed")))
    gap = draw(st.sampled_from((1, 2, 3, 8, 2.5, 0.75)))
    times: tuple = ()
    if arrive == "poisson":  # real arrival times: gaps in hundredths, 0 included (two at once)
        gaps = draw(st.lists(st.integers(0, 600), min_size=len(sessions), max_size=len(sessions)))
        times = tuple(round(sum(gaps[:k + 1]) / 100, 2) for k in range(len(sessions)))
    content = draw(st.sampled_from(CONTENTS))
    shares = tuple((draw(st.integers(-1, i - 1)), draw(st.integers(0, 48))) for i in range(len(sessions)))
    return Case(
        content=content, sys=draw(st.sampled_from((0, 3, 8, 16, 30))), shares=shares,
        bs=bs, blocks=blocks, seqs=draw(st.integers(1, 6)), budget=draw(st.integers(1, 64)),
        each=draw(st.sampled_from(EACH)), cap=draw(st.integers(1, 32)),
        granule=draw(st.sampled_from((0, 0, 2, 4, 8))), order=draw(st.sampled_from(ORDERS)),
        schedule=draw(st.sampled_from(SCHEDULES)), lifo=draw(st.booleans()), prefix=draw(st.booleans()),
        chunked=draw(st.booleans()), reserve=draw(st.booleans()),
        cost=draw(st.sampled_from(sorted(COSTS))), arrive=arrive, gap=gap,
        sessions=sessions, fifo=draw(st.booleans()), iter_claims=draw(st.booleans()), times=times,
        tool=draw(st.sampled_from(TOOLS)), victim=draw(st.sampled_from(VICTIMS)), held=draw(st.booleans()))
