"""A family of one is still a family (*Queues*): its members are named with an index, and a reference
to a member's pool or stage also takes the family's name alone at size one (`R.kv` is `R[0].kv`); at
any other size that is L085."""
import json
import subprocess
import sys
from pathlib import Path

SERQ = [sys.executable, "-m", "serq.cli"]

PROGRAM = """fn main() {
  let NR = %(n)d;
  queue gw : gateway {
    route {
      choose r in NR by (holders(R[r].reqs) + queued(R[r].reqs), r);
      R[r].decode (prompt);
    }
  }
  queue R[NR] : decode {
    device gpu { kv cap 4096; }
    engine on gpu {
      reqs cap 8;
      tokens cap 512;
      schedule { advance running; admit waiting while (running.preempted == 0); }
      execute (0.001 + 0.00001 * batch.tokens);
    }
    pool reqs on R { queue fifo; }
    pool kv on gpu { block 16; evict lru; preempt lifo; }
    decode (prompt) {
      hold reqs (cost(reqs, 1)), kv (cost(kv, prompt)) {
        run R prefill (cost(R, prompt)) growing kv;
        run R decode (cost(R, o - 1)) growing kv;
      }
    }
  }
  workload {
    hidden o;
    arrive poisson(20);
    turn { Size n = 10 + floor(~exp(50)); Size o = 1 + floor(~exp(20)); }
  }
  server { set prompt = n; gw.route(); }
  gauge in_queue = queued(%(ref)s.reqs);
  gauge kv_used = used(%(ref)s.kv);
}
"""


def _run(tmp_path, name, n, ref):
    f = tmp_path / name
    f.write_text(PROGRAM % {"n": n, "ref": ref})
    return subprocess.run(SERQ + ["run", str(f), "--horizon", "50", "--json"], capture_output=True, text=True)


def _results(out: str) -> dict:
    rep = json.loads(out)
    for k in ("program", "files", "inputs"):  # the file's own name and digest differ
        rep.pop(k, None)
    return rep


def test_a_family_of_one_takes_its_name_alone_for_a_members_pool(tmp_path):
    alone = _run(tmp_path, "alone.sq", 1, "R")
    member = _run(tmp_path, "member.sq", 1, "R[0]")
    assert alone.returncode == 0, alone.stderr
    assert member.returncode == 0, member.stderr
    a, m = _results(alone.stdout), _results(member.stdout)
    assert a["gauges"] == m["gauges"] and a["gauges"]["kv_used"]["max"] > 0
    assert a == m


def test_a_family_of_two_names_a_member(tmp_path):
    p = _run(tmp_path, "two.sq", 2, "R")
    assert p.returncode != 0
    assert "error[L085]" in p.stderr and "`R.reqs` is an array of 2: name a member, `R[i].reqs`" in p.stderr
    assert "two.sq:32:27" in p.stderr and "^" in p.stderr and "Traceback" not in p.stderr
