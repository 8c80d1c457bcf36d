"""Every code block and inline snippet of the language reference, as test data.

Each entry: (the reference's section, the production it belongs to, the text). `program` is a
whole program; `items` is a main body (wrapped in `fn main() { }` as well). A `…` in the
reference stands for elided text; where a block elides, the elided part is filled with the
least that the production needs, and the entry says so in its section name ("(filled)").
"""

SNIPPETS = [
    ("Engines on devices", "items", """
device gpu {
  compute (t) = t * a;
  hbm (k) = omega + beta * k;
  kv cap blocks * bs;
}
engine vllm on gpu {
  reqs cap max_seqs;
  tokens cap B;
  schedule {
    let threshold = running.count + waiting.count > 1 ? chunk_cap : inf;
    advance running each at most (threshold);
    admit waiting while (running.preempted == 0) each at most (threshold);
  }
  execute (c0 + max(hbm(batch.kv_decode + batch.kv_prefill), compute(batch.tokens)));
}
pool kv on gpu { block bs; evict lru; preempt lifo; }
pool reqs on vllm { queue fifo; }
"""),
    ("An engine's request", "items", """
engine vllm on gpu {
  reqs cap max_seqs;
  tokens cap B;
  request (prompt, output) {
    set kept = prompt;
    at admission {
      known = max(kept, computed + 1);
      reused = min(cachedin(kv), reusable(known, blocksize(kv)));
    }
    set kept = known;
    set c = min(cached, reusable(known, blocksize(kv)));
    observe hit = c > 0;
    observe prefill_tokens = known - c;
    prefill (known - c) growing kv;
    decode (output - 1 - (known - prompt)) growing kv;
    cache (prompt + output);
  }
  schedule {
    let threshold = running.count + waiting.count > 1 ? chunk_cap : inf;
    advance running each at most (threshold);
    admit waiting while (running.preempted == 0) each at most (threshold)
      taking reqs (1), kv (min(known, reused + budget_left(vllm))) reserve (known);
  }
  execute (c0 + max(hbm(batch.kv_decode + batch.kv_prefill), compute(batch.tokens)));
}
"""),
    ("`at admission` (filled: the body)", "stmts", """
hold reqs (cost(reqs, 1)), kv (cost(kv, min(known, reused + budget_left(vllm)))) reserve (cost(kv, known))
     at admission (known = max(kept, computed + 1),
                   reused = min(cachedin(kv), reusable(known, blocksize(kv)))) { }
"""),
    ("The two sides (filled: the turn block)", "items", """
workload {
  arrive poisson(Lambda);
  hidden o;
  init { set K = 0; }
  turn { }
  session {
    turn;
    while (more) {
      set K = K + n + o;
      tool (~exp(Z));
      turn;
    }
  }
}

server {
  set prompt = K + n;
  vllm (prompt, o);                       // the engine's request
}
"""),
    ("Queues (filled: the device's time resources, the schedule, execute)", "items", """
queue P[NP] : prefill {
  device gpu { compute (t) = t * a; kv cap blocksP * bs; }
  engine on gpu { reqs cap max_seqsP; tokens cap B; schedule { advance running; admit waiting while (running.preempted == 0); } execute (compute(batch.tokens)); }
  pool reqs on P { queue fifo; }
  pool kv on gpu { block bs; evict lru; preempt lifo; }
  prefill (prompt) {
    hold reqs (cost(reqs, 1)), kv (cost(kv, min(prompt, reused + budget_left(P)))) reserve (cost(kv, prompt))
         at admission (reused = min(cachedin(kv), reusable(prompt, bs))) {
      set c = cached;
      run P prefill (cost(P, prompt - c)) growing kv;
    } cache (cost(reqs, kv, prompt)) lease kv (inf);
  }
}
"""),
    ("Queues: the pull relation (filled: the queues' bodies)", "items", """
queue P[NP] : prefill { pool kv { cap 100; } serve fifo; nic ps(BwP); prefill (prompt) { hold kv (cost(kv, prompt)) { run (cost(P, prompt)); } cache (cost(kv, prompt)) lease kv (inf); } }
queue D[ND] : decode {
  pool kv { cap 100; }
  serve fifo;
  nic ps(BwD);
  decode (prompt) from P {
    hold kv (cost(kv, prompt)) {
      set c = 0;
      transfer (prompt - c) from P to kv (prompt - 1 - c);   // over P's NIC and this pod's
    }
  }
}
D pull P latency x0 share maxmin;
"""),
    ("Claims", "items", """
claim work_conserving: every iteration of llm (demand < bmax || tokens == bmax);
claim starved: some iteration of llm (demand >= bmax && tokens < bmax);
claim mean_ok: at end (total(response) <= 1000000 * count(response));
"""),
    ("Expressions", "expr", "max k in 2 (used(kv[k]))"),
    ("Expressions", "expr", "max(used(kv[0]), used(kv[1]))"),
    ("Gauges", "items", "gauge full = max j in N (free(reqs[j]) == 0);"),
    ("Gauges", "expr", "max j in N (used(kv[j])) - min j in N (used(kv[j]))"),
    ("Gauges", "items", "gauge u = used(kv);"),
    ("Engines", "items", "def in_phase() { running.decoding > 0 ? decoding : !decoding }"),
    ("Engines", "expr", "running.decoding < running.count ? !decoding : decoding"),
    ("Engines", "sstmts", "advance running by (remaining);"),
    ("Engines", "sstmts", "advance running by (-remaining);"),
    ("Engines", "sstmts", "advance running only (in_phase()); admit waiting only (in_phase()) while (running.preempted == 0);"),
    ("Engines", "sstmts", "exclusive prefill; admit waiting while (running.preempted == 0);"),
    ("The iteration as a program", "sstmts", "advance running; admit waiting while (running.preempted == 0);"),
    ("Engines on devices", "sstmts", "advance running decode first; admit waiting while (running.preempted == 0);"),
    ("Engines on devices", "eitems", "reqs cap max_seqs; tokens cap B; state phase = 0;"),
    ("Pools", "eitems", "reqs[N] cap c;"),
    ("Every instant settles", "stmts", "loop { set w = w + 1; }"),
    ("Which stage", "items", "stage sandbox[4] : fifo;"),
    ("Which stage", "stmts", "tool on sandbox[j] (Z);"),
    ("Which stage", "stmts", "tool[j] Z;"),
    ("Which stage", "stmts", "tool Z;"),
    ("Which stage", "items", "stage svc : fifo;"),
    ("The serving vocabulary", "stmts", "transfer (X) from P to Q (n);"),
    ("The serving vocabulary", "stmts", "transfer on egress[i], ingress[j] (X) from P to Q (n);"),
    ("The serving vocabulary", "stmts", "run link (cost(link, X)); load Q (cost(Q, n)); release P;"),
    ("The serving vocabulary", "stmts", "run tool (cost(tool, Z)); run tool[j] (cost(tool, Z)); run S[j] (cost(S, Z));"),
    ("The serving vocabulary", "stmts", "run egress[i], ingress[j] (cost(egress, ingress, X)); load Q (cost(Q, n)); release P;"),
    ("The serving vocabulary", "stmts", "choose j in N by (used(kv[j])); tool[j] Z;"),
    ("The serving vocabulary", "stmts", "run E prefill (cost(E, T)); run E decode (cost(E, T));"),
    ("The serving vocabulary", "stmts", "Size n = 1; Cost w = cost(svc, 2); Cost processing = { mem: 1, svc: 2 };"),
    ("Names do not collide", "stmts", "set present = 1; observe admitted = now; observe svc = 1;"),
    ("Names do not collide", "items", "let svc = 1; stage think : fifo; def kv() { 1 } let kv = 1;"),
    ("Queues", "items", "server { gw.route(); }"),
    ("Queues", "stmts", "gw.route(); D[j].decode (prompt); P[i].prefill (prompt); D[j].decode (prompt) from P[i];"),
    ("Queues", "stmts", "nic[self].transfer (n) from P to kv (m);"),
    ("Queues", "stmts", "run D.nic.latency[j] (x0); run P.nic[i], D.nic[j] (cost(P.nic, D.nic, n)); load D.kv[j] (cost(D.kv, n)); release P.kv[i];"),
    ("Queues", "qitems", "nic ps(BwD); serve ps(1) latency x; serve fifo;"),
    ("Queues", "items", "P push D latency x0 share maxmin;"),
    ("Queues", "stmts", "mark read_done; set E.m = now;"),
    ("Queues", "expr", "holders(D[j].kv) + work(P[i]) + budget_left(P)"),
    ("Semantics: Pools", "stmts", "set kept = prompt; set kept = known; run vllm prefill (cost(vllm, known - c)); run vllm decode (cost(vllm, o - 1 - (known - prompt)));"),
    ("Semantics: Pools", "expr", "max(kept, computed + 1)"),
    ("Semantics: Pools", "poolopts", "preempt by (1 - decoding, position - prompt, -prompt) requeue tail;"),
    ("vLLM v1 as a serQ program", "poolopts", "preempt by (-priority, -t0) requeue tail; queue by (priority, t0);"),
    ("vLLM v1 as a serQ program", "expr", "n > 1 ? max(threshold, floor(budget / n)) : inf"),
    ("vLLM v1 as a serQ program", "sstmts", "let threshold = running.count + waiting.count > 1 ? c : inf; advance running each at most (threshold);"),
    ("vLLM v1 as a serQ program", "expr", "reused + min(known - reused, budget_left(vllm))"),
    ("Programs", "stmts", "drop kv; end;"),
    ("Branching", "stmts", "branch with (p) { end; } else { set x = 1; } branch (~bernoulli(p)) { end; }"),
    ("The two sides", "items", "workload { arrive renewal(~exp(1)); } workload { arrive closed(10); } workload { arrive batch(5); } workload { arrive none; }"),
    ("Workload", "wlitems", 'trace "file.csv" ordered; init { set a = 1; } turn { Size n = 2; } hidden a, n;'),
    ("Syntax", "program", 'use "std/args";\nlet a = 1;\ndef f(x) { x + 1 }\nfn main() { let r = args.number("rate", 0.5); share maxmin; }'),
    ("Syntax", "items", "pool kv[2] { cap 10; block 2; evict by (1); preempt none; queue by (waited); reserve held; spill tier via link (1) when (1); }"),
    ("Syntax", "items", "pool kv on E.gpu { cap 1; } stage s : ps(present); stage d : delay; stage f : fifo(2);"),
    ("Syntax", "stmts", "hold kv (cost(kv, 1)) reserve (cost(kv, 2)), reqs (cost(reqs, 1)) reuse (cost(kv, reqs, 0)) { grow kv (cost(kv, 1)); load kv (cost(kv, 1)); } cache (cost(kv, reqs, 1)) lease kv (inf);"),
    ("Syntax", "stmts", "while (x) { fork { run s (cost(s, 1)); } join; } loop { end; } choose j in 4 by (queue(s[j]), j);"),
    ("Syntax", "eitems", "granule 16; execute (1); request (p) { prefill (p); decode (p) growing kv; mark done; at admission { x = 1; } cache (p); }"),
]
