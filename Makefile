# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.serq-installed

.PHONY: demo test check install clean schema fuzz

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

# the Lean side: built where lake is installed, otherwise said to be skipped
check: $(STAMP)
	$(BIN)/python -m pytest
	@if command -v lake >/dev/null 2>&1; then cd lean && lake build; \
	else echo "Lean check SKIPPED: lake is not on the PATH (no Lean toolchain on this machine)"; fi

# the interpreter against the reference kernel on many generated fragment programs (docs/lean.md)
FUZZ_CASES ?= 5000
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	SERQ_FUZZ_CASES=$(FUZZ_CASES) SERQ_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest -q tests/test_ref_differential.py

schema: $(STAMP)
	$(BIN)/python -m serq.ir.schema > docs/reference/ir.schema.json

clean:
	rm -rf $(VENV) build *.egg-info
