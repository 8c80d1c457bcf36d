"""The interpreter against queueing theory: each mean lies within the run's own 95% interval
(widened by a small margin) of the closed form. The programs here are written for the tests,
apart from the three examples the reference names."""
from __future__ import annotations

import math
import os

import pytest

from serq import api
from serq.ir.model import Settings

HERE = os.path.dirname(__file__)
EX = os.path.join(HERE, "..", "examples")
MARGIN = 1.5  # the interval, widened


def run_file(path, inputs=None, **settings):
    prog = api.load(path, inputs or {})
    rep = api.run(prog, Settings(**settings))
    rep.pop("_sim")
    return rep


def run_text(text, inputs=None, **settings):
    prog = api.load_text(text, "t.sq", inputs or {})
    rep = api.run(prog, Settings(**settings))
    rep.pop("_sim")
    return rep


def near(stat, expected, what=""):
    mean, ci = stat["mean"], stat["ci95"]
    assert ci is not None, f"{what}: too few samples"
    assert abs(mean - expected) <= MARGIN * ci, f"{what}: {mean:.4f} ± {ci:.4f}, theory {expected:.4f}"


def erlang_c(c, a):
    """The probability of waiting in M/M/c with offered load a = lambda/mu."""
    s = sum(a ** k / math.factorial(k) for k in range(c))
    top = a ** c / math.factorial(c) * c / (c - a)
    return top / (s + top)


@pytest.mark.parametrize("lam,c2", [(0.8, 1.0), (0.5, 2.0)])
def test_mg1_against_pollaczek_khinchine(lam, c2):
    rep = run_file(os.path.join(EX, "single-turn", "mg1.sq"), {"lambda": lam, "mean": 1, "c2": c2},
                   horizon=60000, warmup=1000)
    es2 = (1 + c2) * 1.0
    w = lam * es2 / (2 * (1 - lam))
    near(rep["client"]["response"], w + 1.0, "M/G/1 response")
    assert abs(rep["stages"]["svc"]["utilisation"] - lam) < 0.02


PS_LAWS = {"erlang": "~erlang(4, 1)", "det": "~det(1)", "h2": "~h2(1, 4)"}


@pytest.mark.parametrize("law", sorted(PS_LAWS))
def test_mg1_ps_is_insensitive_to_the_service_law(law):
    text = f"""fn main() {{
      stage cpu : ps(1);
      workload {{ arrive poisson(0.7); turn {{ Cost w = cost(cpu, {PS_LAWS[law]}); }} }}
      server {{ run cpu (w); }}
    }}"""
    rep = run_text(text, horizon=50000, warmup=1000)
    near(rep["client"]["response"], 1 / (1 - 0.7), f"M/G/1-PS ({law})")


def test_ps_example():
    rep = run_file(os.path.join(EX, "single-turn", "ps.sq"), horizon=50000, warmup=1000)
    near(rep["client"]["response"], 1 / (1 - 0.7), "ps.sq")
    # Little's law: the time-average number present is lambda times the mean response, 0.7 / 0.3
    near(rep["gauges"]["jobs"], 0.7 / (1 - 0.7), "ps.sq jobs present")


def mva(n, think, service):
    q = 0.0
    for k in range(1, n + 1):
        r = service * (1 + q)
        x = k / (r + think)
        q = x * r
    return r, x


def test_closed_example_against_mean_value_analysis():
    rep = run_file(os.path.join(EX, "multi-turn", "closed.sq"), {"sessions": 5}, horizon=60000, warmup=1000)
    r, x = mva(5, 4.0, 1.0)
    near(rep["client"]["response"], r, "M/M/1//5 response")
    thru = rep["stages"]["cpu"]["completed"] / (rep["end"] - rep["warmup"])
    assert abs(thru - x) / x < 0.02, (thru, x)


def test_mmc_against_erlang_c():
    c, lam = 3, 2.4
    text = f"""fn main() {{
      stage svc : fifo({c});
      workload {{ arrive poisson({lam}); turn {{ Cost w = cost(svc, ~exp(1)); }} }}
      server {{ run svc (w); }}
    }}"""
    rep = run_text(text, horizon=40000, warmup=1000)
    wq = erlang_c(c, lam) / (c - lam)
    near(rep["client"]["response"], wq + 1, "M/M/3 response")


def test_pool_in_front_of_a_delay_stage_is_mmc():
    c, lam = 3, 2.4
    text = f"""fn main() {{
      pool slots {{ cap {c}; }}
      stage work : delay;
      workload {{ arrive poisson({lam}); turn {{ Cost w = cost(work, ~exp(1)); }} }}
      server {{ hold slots (cost(slots, 1)) {{ run work (w); }} }}
    }}"""
    rep = run_text(text, horizon=40000, warmup=1000)
    near(rep["client"]["response"], erlang_c(c, lam) / (c - lam) + 1, "pool + delay")
    assert abs(rep["pools"]["slots"]["mean_used"] - lam) < 0.05


def test_tandem_stations_jackson():
    text = """fn main() {
      stage a : fifo; stage b : fifo;
      workload { arrive poisson(0.5); turn { Cost wa = cost(a, ~exp(1)); Cost wb = cost(b, ~exp(1.5)); } }
      server { run a (wa); run b (wb); }
    }"""
    rep = run_text(text, horizon=60000, warmup=1000)
    expect = 1 / (1 - 0.5) + 1.5 / (1 - 0.5 * 1.5)
    near(rep["client"]["response"], expect, "tandem")


def test_non_preemptive_priority_by_queue_keys_cobham():
    text = """fn main() {
      pool server { cap 1; queue by (cls); }
      stage work : delay;
      workload {
        arrive poisson(0.7);
        turn { Size cls = ~bernoulli(0.4 / 0.7); Cost w = cost(work, ~exp(1)); }
      }
      server {
        set t0 = now;
        hold server (cost(server, 1)) { run work (w); }
        branch (cls == 0) { observe r0 = now - t0; } else { observe r1 = now - t0; }
      }
    }"""
    rep = run_text(text, horizon=80000, warmup=1000)
    # class 0 (rate 0.3) is served first; class 1 (rate 0.4); exponential service of mean 1
    w0 = (0.3 * 2 + 0.4 * 2) / 2
    near(rep["observe"]["r0"], w0 / (1 - 0.3) + 1, "class 0")
    near(rep["observe"]["r1"], w0 / ((1 - 0.3) * (1 - 0.7)) + 1, "class 1")


FLOWS = """fn main() {
  stage a : ps(2); stage b : ps(1);
  share %s;
  workload { arrive batch(3); }
  server {
    branch (serial == 0) { run a, b (cost(a, b, 1)); observe t0 = now; }
    else { branch (serial == 1) { run a (cost(a, 1)); observe t1 = now; } else { run b (cost(b, 1)); observe t2 = now; } }
  }
}"""


@pytest.mark.parametrize("policy,t1", [("maxmin", 2 / 3), ("bottleneck", 1.0)])
def test_a_flow_over_two_stages_by_hand(policy, t1):
    # a: ps(2) and b: ps(1); flow 0 holds both, flow 1 a, flow 2 b, each 1 unit of work.
    # maxmin: flows 0 and 2 fill b at 1/2 each, flow 1 takes the 3/2 left at a, done at 2/3; then
    # 0 and 2 go on at 1/2 and end at 2. bottleneck: 0 gets min(2/2, 1/2), 1 gets 2/2 and ends at 1,
    # 2 gets 1/2; then 0 and 2 keep 1/2 each (b is still the bottleneck) and end at 2.
    rep = run_text(FLOWS % policy)
    obs = rep["observe"]
    assert obs["t1"]["mean"] == pytest.approx(t1, rel=1e-9)
    assert obs["t0"]["mean"] == pytest.approx(2.0, rel=1e-9)
    assert obs["t2"]["mean"] == pytest.approx(2.0, rel=1e-9)
    assert rep["stages"]["b"]["utilisation"] == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("draw,mean,median", [
    ("~lognormal(5, 1)", math.exp(5.5), math.exp(5)),
    ("~lognormal_mean(250, 300)", 250.0, 250.0 / math.sqrt(1 + (300 / 250) ** 2)),
])
def test_lognormal_sample_mean_and_median_are_the_closed_form(draw, mean, median):
    """A ShareGPT-like length in one line: the sample mean within its 95% interval of exp(mu + sigma^2/2),
    the sample median within four standard errors of exp(mu) (the median's asymptotic standard error,
    1 / (2 f(median) sqrt(n)) = median sigma sqrt(2 pi) / (2 sqrt(n)))."""
    n = 100_000
    rep = run_text(f"""fn main() {{
      stage svc : delay;
      workload {{ arrive poisson(1); turn {{ set x = {draw}; }} }}
      server {{ observe len = x; }}
    }}""", arrivals=n)
    stat = rep["observe"]["len"]
    near(stat, mean, draw)
    sigma = math.sqrt(2 * math.log(mean / median))
    se = median * sigma * math.sqrt(2 * math.pi) / (2 * math.sqrt(n))
    assert abs(stat["p50"] - median) <= 4 * se, (stat["p50"], median, se)


def test_mg1_with_lognormal_service_against_pollaczek_khinchine():
    """M/G/1 whose service is lognormal (mean 1, sd 1.5: c2 = 2.25): the mean wait is
    lambda E[S^2] / (2 (1 - rho))."""
    lam, m, s = 0.6, 1.0, 1.5
    es2 = s * s + m * m
    rho = lam * m
    rep = run_text(f"""fn main() {{
      stage svc : fifo;
      workload {{ arrive poisson({lam}); turn {{ Cost w = cost(svc, ~lognormal_mean({m}, {s})); }} }}
      server {{ run svc (w); }}
    }}""", horizon=400000, warmup=2000)
    near(rep["client"]["response"], lam * es2 / (2 * (1 - rho)) + m, "M/G/1 lognormal")


def test_an_empirical_draw_follows_its_file_s_weights(tmp_path):
    """A histogram file (value, weight) and a file of samples: each value drawn as often as its weight,
    within 4 standard errors of a binomial count; the file is read as the program links, so the IR
    holds the values, and a value the file does not have is never drawn."""
    (tmp_path / "h.csv").write_text("value,weight\n1,1\n2,3\n# none of 5\n5,0\n\n")
    (tmp_path / "s.csv").write_text("tokens\n10\n20\n20\n70\n")
    (tmp_path / "e.sq").write_text("""fn main() {
      stage svc : delay;
      workload { arrive poisson(1); turn { set a = ~empirical("h.csv"); set b = ~empirical("s.csv"); } }
      server { observe ha = a; observe hb = b; observe two = a == 2; observe twenty = b == 20; }
    }""")
    n = 40_000
    prog = api.load(str(tmp_path / "e.sq"))
    rep = api.run(prog, Settings(arrivals=n))
    obs = rep["observe"]
    for name, p in (("two", 0.75), ("twenty", 0.5)):
        assert abs(obs[name]["mean"] - p) <= 4 * math.sqrt(p * (1 - p) / n), (name, obs[name]["mean"])
    assert obs["ha"]["max"] == 2 and obs["ha"]["min"] == 1 and obs["hb"]["max"] == 70
    draws = [x for x in prog.model_dump_json().split('"dist":"empirical"')[1:]]
    assert len(draws) == 2 and '"values":[1.0,2.0,5.0]' in prog.model_dump_json().replace(" ", "")
