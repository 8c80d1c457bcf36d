"""The report (catalogue: *The report*): the JSON object, and its text form (`--dump DIR`: serq/interp/dump.py)."""
from __future__ import annotations

import math

from serq.interp.stats import summary
from serq.lang.lower.constants import fmt

BOOL_NOTE = 40


def build(sim) -> dict:
    end = sim.end
    obs = {}
    for name, ser in sorted(sim.obs.items()):
        obs[name] = summary(ser.after(), sim.percentiles)
    notes = list(sim.notes)
    for name, ser in sorted(sim.obs.items()):
        vals = ser.v
        if len(vals) >= BOOL_NOTE and all(v in (0.0, 1.0) for v in vals) and not any(vals):
            notes.append(f"observe {name}: zero in all {len(vals)} samples")
    pools = {}
    growing_at_end = 0
    stalled = []
    for m in sim.pools:
        over = 0
        fr = m.over
        if fr is not None and fr.members:
            q = fr.members[0].queue  # a hold waits in its first pool's queue, for each of its pools
            if q and q[0] is fr:
                over = 1
                notes.append(f"over: pool {m.label}'s head asks for more than its cap {m.cap:g}")
        growing_at_end += len(m.growers)
        if m.growers:
            holders = {a.frame.sess.id for a in m.allocs}
            waiting = {g[0].id for g in m.growers}
            if holders and holders <= waiting:
                stalled.append(m.label)
        pools[m.label] = {
            "cap": m.cap if m.cap != math.inf else None,
            "mean_used": m.used_avg.result(end)["mean"],
            "max_used": m.max_used,
            "admitted": m.admitted,
            "rejected": m.rejected,
            "evicted": m.evicted,
            "preempted": m.preempted,
            "over_cap": over,
        }
    for eng in getattr(sim, "engines", []):
        # an engine the linker could not see stall: its work is unscheduled when the run ends
        if not eng.busy and (any(r.alive for r in eng.reqs) or any(p.queue for p in eng.admitted)):
            notes.append(f"idle: engine {eng.label} ends the run with work it does not schedule"
                         f"{_unscheduled(eng)}")
    if growing_at_end:
        notes.append(f"grow: {growing_at_end} hold(s) still waiting to grow at the end")
    for label in stalled:
        notes.append(f"growing_stalled: every holder of pool {label} waits to grow")
    stages = {}
    for st in sim.stages:
        stages[st.label] = {"utilisation": st.utilisation(end), "completed": st.completed_after_warmup,
                            "kind": _kind(st)}
    gauges = {name: avg.result(end) for name, _, avg in sim.gauges}
    client = {k: summary(v.after(), sim.percentiles) for k, v in sim.client.items()}
    out = {
        "seed": sim.seed,
        "horizon": sim.horizon,
        "warmup": sim.warmup,
        "end": end,
        "sessions": {"arrived": sim.sessions_arrived, "completed": sim.sessions_completed,
                     "rejected": sim.sessions_rejected, "stuck": len(sim.stuck), "live_at_end": sim.live},
        "client": client,
        "throughput": _throughput(sim, client["response"]["count"], end - sim.warmup),
    }
    if sim.slo is not None:
        out["slo"] = {m: x for m, x in zip(sim.SLO, sim.slo) if x is not None}
    if out["throughput"]["total_tokens_per_s"]:
        out["vllm_bench"] = vllm_bench(sim, client, out["throughput"], end - sim.warmup)
    return out | {
        "observe": obs,
        "gauges": gauges,
        "pools": pools,
        "stages": stages,
        "claims": {k: dict(v) for k, v in sim.claim_state.items()},
        "growing_at_end": growing_at_end,
        "notes": notes,
    }


def _throughput(sim, answered: int, span: float) -> dict:
    """Per second of [warmup, end], as vLLM's benchmark client reports them over its run: the
    answered turns (the client's response samples), and their prompt and output tokens
    (report.md, *Throughput, ITL and goodput*); with --slo, those that met every objective."""
    def per_s(x):
        return x / span if span > 0 else None
    # input tokens as vLLM's client counts them, the whole prompt (the cached prefix too); those the
    # engine computed beside them
    whole = sim.tokens_in + sim.tokens_cached
    out = {"requests_per_s": per_s(answered), "input_tokens_per_s": per_s(whole),
           "computed_input_tokens_per_s": per_s(sim.tokens_in),
           "output_tokens_per_s": per_s(sim.tokens_out),
           "total_tokens_per_s": per_s(whole + sim.tokens_out),
           # of the prompt tokens, the share a prefix cache gave (vLLM's prefix cache hit rate, in tokens)
           "prefix_cache_hit_rate": sim.tokens_cached / whole if whole > 0 else None}
    if sim.slo is not None:
        good = sim.good
        if sim.queued:  # queueing.py keeps no turn's record: its turns have a response alone
            limit = sim.slo[3]
            good = sum(1 for v in sim.c_response.after() if limit is None or v <= limit)
        out["goodput_per_s"] = per_s(good)
    return out


# the client's metrics under the names vLLM's benchmark client (`vllm bench serve --save-result`) gives them
BENCH_METRICS = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "response"))


def vllm_bench(sim, client: dict, tp: dict, span: float) -> dict:
    """The run's figures as vLLM's benchmark client saves its result (report.md, *vllm_bench*): its
    field names, times in milliseconds; the program's unit of time taken as the second."""
    def count(x):  # token counts are whole: integers, as vLLM writes them
        return int(x) if math.isfinite(x) and x == int(x) else x
    out = {"duration": span, "completed": client["response"]["count"],
           "total_input_tokens": count(sim.tokens_in + sim.tokens_cached), "total_output_tokens": count(sim.tokens_out),
           "request_throughput": tp["requests_per_s"]}
    if "goodput_per_s" in tp:
        out["request_goodput"] = tp["goodput_per_s"]
    out["output_throughput"] = tp["output_tokens_per_s"]
    out["total_token_throughput"] = tp["total_tokens_per_s"]

    def ms(v):
        return None if v is None else v * 1000.0
    for name, ours in BENCH_METRICS:
        st = client[ours]
        out[f"mean_{name}_ms"] = ms(st["mean"])
        out[f"median_{name}_ms"] = ms(st.get("p50"))
        out[f"std_{name}_ms"] = ms(st["std"])
        for key in list(st)[list(st).index("ci95") + 1:list(st).index("min")]:
            out[f"{key}_{name}_ms"] = ms(st[key])   # p99 -> p99_ttft_ms, p99.9 -> p99.9_ttft_ms, as vLLM names them
    return out


def finite(rep: dict) -> dict:
    """The report is strict JSON (RFC 8259), which has no inf or NaN: a non-finite number is written
    null, and a note names its field (`non_finite: end is inf`)."""
    notes = []

    def walk(v, path):
        if isinstance(v, dict):
            return {k: walk(x, f"{path}.{k}" if path else k) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, float) and not math.isfinite(v):
            notes.append(f"non_finite: {path} is {fmt(v)}")
            return None
        return v

    out = walk(rep, "")
    out["notes"] = out["notes"] + notes
    return out


def _f(v, w=10):
    if v is None:
        return "-".rjust(w)
    if isinstance(v, float) and (abs(v) >= 1e6 or (abs(v) < 1e-3 and v != 0)):
        return f"{v:{w}.3e}"
    return f"{v:{w}.4f}" if isinstance(v, float) else f"{v:>{w}}"


def _g(v):
    return _f(v, 0).strip()


def text(rep: dict, file: str, ms: bool = False) -> str:
    """The report as text; `ms` (serq run --units ms): the client's times in milliseconds, a program
    whose unit of time is the second (report.md, *Units*)."""
    out = [f"serq run {file}: seed {rep['seed']}, warm-up {rep['warmup']:g}, end {rep['end']:g}"
           + (f" (horizon {rep['horizon']:g})" if rep["horizon"] is not None else "")]
    s = rep["sessions"]
    out.append(f"sessions: {s['arrived']} arrived, {s['completed']} completed, {s['rejected']} rejected, "
               f"{s['stuck']} stuck, {s['live_at_end']} live at the end")
    tp = rep["throughput"]
    line = f"throughput: {_g(tp['requests_per_s'])} requests/s"
    if tp["total_tokens_per_s"]:  # a run without engine tokens has requests alone
        computed = tp.get("computed_input_tokens_per_s")
        hit = tp.get("prefix_cache_hit_rate")
        cached = (f" ({_g(computed)} computed, a prefix cache hit rate of {100 * hit:.1f}%)"
                  if computed is not None and computed != tp["input_tokens_per_s"] and hit is not None else "")
        line += (f"; tokens/s: {_g(tp['input_tokens_per_s'])} input{cached}, {_g(tp['output_tokens_per_s'])} output, "
                 f"{_g(tp['total_tokens_per_s'])} total")
    out.append(line)
    if "slo" in rep:
        slo = ", ".join(f"{m}<={fmt(x * 1000)}ms" if ms else f"{m}<={fmt(x)}" for m, x in rep["slo"].items())
        out.append(f"goodput: {_g(tp['goodput_per_s'])} requests/s meeting {slo}")

    def table(title, rows, scale=1.0):
        if not rows:
            return
        if scale != 1.0:
            rows = {name: {k: v * scale if k != "count" and isinstance(v, float) else v for k, v in st.items()}
                    for name, st in rows.items()}
        out.append("")
        # the percentiles the run was asked for (--percentiles): the fields between ci95 and min
        first = next(iter(rows.values()))
        keys = list(first)
        pcts = keys[keys.index("ci95") + 1:keys.index("min")]
        out.append(f"{title:<24}{'count':>10}{'mean':>11}{'std':>11}{'±95%':>11}"
                   + "".join(f"{k:>11}" for k in pcts) + f"{'max':>11}")
        for name, st in rows.items():
            out.append(f"{name:<24}{st['count']:>10} {_f(st['mean'])} {_f(st['std'])} {_f(st['ci95'])} "
                       + "".join(f"{_f(st[k])} " for k in pcts) + _f(st["max"]))
    table("client (ms)" if ms else "client", {k: v for k, v in rep["client"].items() if v["count"]},
          1000.0 if ms else 1.0)
    table("observe", rep["observe"])
    if rep["gauges"]:
        out.append("")
        out.append(f"{'gauge':<24}{'mean':>11}{'±95%':>11}{'min':>11}{'max':>11}")
        for name, g in rep["gauges"].items():
            out.append(f"{name:<24} {_f(g['mean'])} {_f(g['ci95'])} {_f(g['min'])} {_f(g['max'])}")
    if rep["pools"]:
        out.append("")
        out.append(f"{'pool':<24}{'cap':>11}{'mean used':>11}{'max used':>11}{'admitted':>10}{'rejected':>10}"
                   f"{'evicted':>10}{'preempted':>10}")
        for name, p in rep["pools"].items():
            out.append(f"{name:<24} {_f(p['cap'])} {_f(p['mean_used'])} {_f(p['max_used'])}{p['admitted']:>10}"
                       f"{p['rejected']:>10}{p['evicted']:>10}{p['preempted']:>10}")
        if any(p["evicted"] for p in rep["pools"].values()):
            out.append("(used: units held; admitted, rejected, preempted: holds; evicted: cached entries dropped,")
            out.append(" per block on a pool with blocks; a hold's cache (...) keeps one on each pool it takes, request "
                       "slots included)")
    if rep["stages"]:
        out.append("")
        out.append(f"{'stage':<24}{'utilisation':>12}{'completed':>11}  what they count")
        for name, st in rep["stages"].items():
            what = COUNTS.get(st.get("kind"), "")
            out.append(f"{name:<24} {_f(st['utilisation'], 11)}{st['completed']:>11}  {what}".rstrip())
    if rep["claims"]:
        out.append("")
        for name, c in rep["claims"].items():
            extra = f" at {c['at']:g}" if c["at"] is not None else ""
            extra += f" (session {c['session']})" if c["session"] is not None else ""
            out.append(f"claim {name}: {c['status']}{extra}")
    for n in rep["notes"]:
        out.append(f"note: {n}")
    return "\n".join(out)


def _unscheduled(eng) -> str:
    """The requests an idle engine leaves: its runs by session serial and tokens left, and its queues."""
    if eng.co:
        eng.sim._co_flush(eng)
    runs = [r for r in eng.reqs if r.alive]
    parts = []
    if runs:
        shown = ", ".join(f"session {r.sess.serial} {r.mode} with {r.left:g} tokens left" for r in runs[:3])
        more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
        parts.append(f"{len(runs)} running ({shown}{more})")
    waiting = sum(len(p.queue) for p in eng.admitted)
    if waiting:
        parts.append(f"{waiting} waiting")
    return ": " + "; ".join(parts)


# what a stage's utilisation and completed count, by its kind (report.md, `stages.S`)
COUNTS = {
    "engine": "engine: the time it runs an iteration; runs completed (a turn's prefill and its decode are one each)",
    "fifo": "fifo(c): busy servers / c; jobs",
    "fifo(inf)": "fifo(inf): the time a job is present; jobs",
    "ps": "ps: the time a job is present; jobs",
    "delay": "delay: the time a job is present (a think time: not a server's load); jobs",
    "flow": "flows: their rates over the link's capacity; jobs",
}


def _kind(st) -> str:
    """The stage's kind, as `stages.S.kind` names it."""
    from serq.interp.engine import Engine
    from serq.interp.stages import PS, FlowStage, Fifo
    if isinstance(st, Engine):
        return "engine"
    if isinstance(st, FlowStage):
        return "flow"
    if isinstance(st, Fifo):
        return "fifo" if st.c != math.inf else "fifo(inf)"
    if isinstance(st, PS):
        return "delay" if st.phi is None else "ps"
    return "stage"
