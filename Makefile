# The README's two commands: `make demo` and `make test`. Both set up .venv first (so does `make fuzz`).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.serq-installed

.PHONY: demo test check golden install clean schema fuzz

# a fuzz campaign (tools/fuzz.py): FUZZ_CASES cases, FUZZ_JOBS workers, FUZZ_TIMEOUT seconds of CPU a case (a case over it runs again alone with 3 times that before it is a hang;
# one that serq run's own note says is too slow to finish is a slow program, listed in FUZZ_OUT/slow.txt, not a failure);
# each failure's cause and smallest reproducer go to FUZZ_OUT; FUZZ_ARGS more options of tools/fuzz.py
# (e.g. FUZZ_ARGS="--profile suite --on nan_arith": is that family fixed?); then FUZZ_CASES / 10 cases of
# serq verify on mutated programs with claims (a small bound, 3 s a claim), their failures in FUZZ_OUT/verify
FUZZ_CASES   ?= 2000
FUZZ_JOBS    ?= 2
FUZZ_TIMEOUT ?= 10
FUZZ_SEED    ?= 1
FUZZ_OUT     ?= fuzz-out
FUZZ_ARGS    ?=
# and the interpreter against the reference kernel on DIFF_CASES generated fragment programs (docs/lean.md)
DIFF_CASES   ?= 5000
# and the verifier's induction on STEP_CASES generated programs: every move of the kernel an encoded
# move, the lemmas held at every iteration and proved (docs/verify.md, *The step as a formula*), each
# completed run at least the iterations a hold's lemma counts, each proof per session true on every
# workload of a tiny bound (*Per session*), on the per-session programs and on vLLM-shaped caching ones,
# and serq verify's every verdict on vLLM-shaped programs the one enumeration gives (STEP_CASES / 6 programs),
# and no `proved` serq run refutes on STEP_CASES programs whose claims sit on ties (docs/verify.md, *Floating point*)
STEP_CASES   ?= 300

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,experiments]'
	$(BIN)/python -m compileall -q serq   # an editable install compiles nothing: serq's bytecode, read even where PYTHONDONTWRITEBYTECODE is set
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/serq check examples/multi-turn/vllm.sq
	$(BIN)/serq run examples/single-turn/mg1.sq --horizon 20000 --warmup 500

# the suite on two workers (pytest-xdist): under 10 minutes on 2 cores. The fault-injection and input-fuzz
# campaigns (processes signalled at random points, full disks, corrupted files) and the tests marked `campaign`
# (slow differential campaigns and every-example runs) run in `make check`
CHECK_ONLY := tests/test_reliability.py tests/test_fuzz_inputs.py
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not campaign" $(CHECK_ONLY:%=--ignore=%)

# the user's verification gate (docs/overview.md): every example links and draws, the generated Lean is current, the
# papers' verdicts at the default bound are as recorded, the differential suite passes, and every Lean
# module and file compiles with every theorem checked (tools/lean_check.py: a native lake where one is,
# else Lean in WebAssembly under Node.js, installed into .lean-wasm/; SKIPPED only where neither is)
EXAMPLES     := $(sort $(shell find examples -name '*.sq' -not -path '*/lib/*'))   # lib/: libraries a program uses, no programs
DIFFERENTIAL := $(sort $(wildcard tests/test_ref*.py tests/test_differential*.py)) tests/test_leangen.py
LEAN_JOBS    ?= 2
# 0: the differential suite and the papers' tests were run by `make test` just before (.ci/run), not again
CHECK_SUITE  ?= 1
# the interpreter against Lean: LEAN_CASES generated programs from LEAN_SEED (tools/lean_differential.py)
LEAN_CASES   ?= 24
LEAN_SEED    ?= 45
check: $(STAMP)
	@d=$$(mktemp -d) && for f in $(EXAMPLES); do \
	  $(BIN)/serq check $$f && $(BIN)/serq draw $$f -o $$d/$$(echo $$f | tr / _).svg || { rm -rf $$d; exit 1; }; \
	done; rm -rf $$d
	$(BIN)/python -m serq.leangen --check
	$(BIN)/python tools/gen_oracle_lean.py --check
	$(BIN)/python tools/gen_claims_proved.py --check
	$(BIN)/python tools/gen_serve_lean.py --check
	@if [ "$(CHECK_SUITE)" != 0 ]; then $(BIN)/python -m pytest -n $(LEAN_JOBS) $(DIFFERENTIAL) tests/test_papers.py; \
	else echo "the differential suite and tests/test_papers.py: run by make test just before (CHECK_SUITE=0)"; fi
	@# the papers' verdicts beside docs/sizing.md's study and the tutorial's sizing sweeps: each one process, on 2 cores
	@log=$$(mktemp) && { $(BIN)/python tools/verify_papers.py --check > $$log 2>&1 & p=$$!; } && \
	SERQ_DOCS_ALL=1 $(BIN)/python -m pytest -q tests/test_docs_sizing.py -k "study or tutorial"; a=$$?; \
	wait $$p; b=$$?; echo "tools/verify_papers.py --check:"; cat $$log; rm -f $$log; test $$a = 0 -a $$b = 0
	SERQ_RELIABILITY_ALL=1 $(BIN)/python -m pytest -q -n 2 $(CHECK_ONLY)   # every signal seed, a sweep on Ray, corrupted inputs
	$(BIN)/python -m pytest -q -n 2 -m campaign $(CHECK_ONLY:%=--ignore=%)   # the campaigns make test leaves
	$(BIN)/python tools/lean_check.py --jobs $(LEAN_JOBS) --cases $(LEAN_CASES) --seed $(LEAN_SEED)

# regenerate the golden Lean files, lean/Serq/Oracle.lean (and its parts), lean/Serq/Serve.lean,
# lean/Serq/Papers/ and examples/papers/ClaimsProved.lean (docs/leangen.md, docs/lean.md); Oracle.lean
# tries the README's 52 scenarios (tools/oracle/results/) and the first 4 of each of the 8 families of
# tools/oracle/extra/, and states those the Lean check's budget allows (tools/kernel_cost.py)
golden: $(STAMP)
	$(BIN)/python -m serq.leangen --update
	$(BIN)/python tools/gen_oracle_lean.py
	$(BIN)/python tools/gen_claims_proved.py
	$(BIN)/python tools/gen_serve_lean.py

# both campaigns run; it fails when either found anything
fuzz: $(STAMP)
	$(BIN)/python tools/fuzz.py --cases $(FUZZ_CASES) --jobs $(FUZZ_JOBS) --timeout $(FUZZ_TIMEOUT) \
		--seed $(FUZZ_SEED) --out $(FUZZ_OUT) $(FUZZ_ARGS); a=$$?; \
	$(BIN)/python tools/fuzz.py --cases $$(( $(FUZZ_CASES) / 10 )) --jobs $(FUZZ_JOBS) --timeout 120 --target verify \
		--seed $(FUZZ_SEED) --out $(FUZZ_OUT)/verify $(FUZZ_ARGS) || a=1; \
	SERQ_FUZZ_CASES=$(DIFF_CASES) SERQ_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest -q tests/test_ref_differential.py; \
	b=$$?; \
	SERQ_FUZZ_CASES=$(STEP_CASES) SERQ_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest -q \
		tests/test_verify_step.py::test_every_move_of_the_kernel_is_an_encoded_move \
		tests/test_verify_invariant.py::test_the_lemmas_hold_at_every_iteration_and_imply_the_invariant_claims \
		tests/test_verify_session.py::test_a_run_lasts_at_least_its_iterations \
		tests/test_verify_session.py::test_per_session_proofs_hold_on_every_workload_of_generated_programs \
		tests/test_verify_session.py::test_per_session_proofs_of_generated_caching_programs_hold_on_every_workload \
		tests/test_verify_campaign.py \
		tests/test_verify_floats.py::test_no_proof_the_simulator_refutes_on_programs_with_ties; \
	c=$$?; test $$a = 0 -a $$b = 0 -a $$c = 0

schema: $(STAMP)
	$(BIN)/python -m serq.ir.schema > docs/reference/ir.schema.json

clean:
	rm -rf $(VENV) build *.egg-info fuzz-out .lean-wasm
