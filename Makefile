# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.serq-installed

.PHONY: demo test check golden install clean schema fuzz

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/serq check examples/multi-turn/vllm.sq
	$(BIN)/serq run examples/single-turn/mg1.sq --horizon 20000 --warmup 500

test: $(STAMP)
	$(BIN)/python -m pytest

# the user's verification gate (README): every example links, the generated Lean is current, the
# differential suite passes, and lean/ builds where lake is installed (else said to be skipped)
EXAMPLES     := $(sort $(shell find examples -name '*.sq'))
GOLDEN_LEAN  := $(sort $(shell find tests/golden/lean -name '*.lean'))
DIFFERENTIAL := $(sort $(wildcard tests/test_ref*.py tests/test_differential*.py)) tests/test_leangen.py
check: $(STAMP)
	@for f in $(EXAMPLES); do $(BIN)/serq check $$f || exit 1; done
	$(BIN)/python -m serq.leangen --check
	$(BIN)/python tools/gen_oracle_lean.py --check
	$(BIN)/python -m pytest $(DIFFERENTIAL)
	@if command -v lake >/dev/null 2>&1; then cd lean && lake build && \
	  for f in $(GOLDEN_LEAN); do echo "lake env lean $$f"; lake env lean ../$$f || exit 1; done; \
	else echo "Lean build SKIPPED: lake is not on the PATH (no Lean toolchain here); lean/ and the golden files were not compiled"; fi

# regenerate the golden Lean files and lean/Serq/Oracle.lean (docs/leangen.md)
golden: $(STAMP)
	$(BIN)/python -m serq.leangen --update
	$(BIN)/python tools/gen_oracle_lean.py

# the interpreter against the reference kernel on many generated fragment programs (docs/lean.md)
FUZZ_CASES ?= 5000
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	SERQ_FUZZ_CASES=$(FUZZ_CASES) SERQ_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest -q tests/test_ref_differential.py

schema: $(STAMP)
	$(BIN)/python -m serq.ir.schema > docs/reference/ir.schema.json

clean:
	rm -rf $(VENV) build *.egg-info
