# Two commands do all set-up on a fresh machine:  make demo  and  make test.
# The install is reproducible: $(LOCK) pins every package, with its hashes, to what CI tested. It
# is generated from pyproject.toml (the core dependencies plus the extras in EXTRAS) by  make lock.
# torch is locked as the CPU wheel 2.13.0+cpu, by its hash: nothing can pull in the multi-GB CUDA
# build an unpinned torch (via sentence-transformers) would be. No package index but PyTorch's
# serves that build, so make install takes it from the folder TORCH_WHEELS when the wheel is
# there (this workplace's /opt/wheels), else from the CPU wheel index TORCH_INDEX_URL (PyTorch's;
# a mirror of it works too), checked against the same hash; the rest of the lock comes from the
# usual index. docs/development.md describes both paths.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hybridsag-installed
PYTEST_ARGS ?=
# The extras that make install (and so make test and CI) installs, and that make lock locks.
# Adding an extra here and running  make lock  is all it takes; tests/unit/test_lock.py checks.
EXTRAS := test server formats service onnx langchain llamaindex mcp ab postgres docs tantivy bench
LOCK   := requirements.lock
TORCH  := torch==2.13.0+cpu
UV     := uv==0.13.9
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

# Where torch comes from (both are overridable:  make install TORCH_WHEELS=~/wheels ).
TORCH_WHEELS    ?= /opt/wheels
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
# The locked wheel in TORCH_WHEELS (torch-2.13.0+cpu-*.whl), or nothing.
TORCH_WHEEL := $(firstword $(wildcard $(TORCH_WHEELS)/$(subst ==,-,$(TORCH))-*.whl))
# The lock's torch entry alone, pin and hash, for the install from TORCH_INDEX_URL.
TORCH_REQ   := $(VENV)/torch-requirement.txt
ifneq ($(TORCH_WHEEL),)
TORCH_FROM  := $(TORCH_WHEEL)
TORCH_FIRST :=
TORCH_LINKS := --find-links $(TORCH_WHEELS)
else
TORCH_FROM  := $(TORCH_INDEX_URL) (no $(subst ==,-,$(TORCH))-*.whl in $(TORCH_WHEELS))
TORCH_PIP   := $(PIP) --require-hashes --no-deps --index-url $(TORCH_INDEX_URL) -r $(TORCH_REQ)
TORCH_FIRST := @echo '$(TORCH_PIP)' && $(TORCH_PIP) \
	|| { echo "make install: $(TORCH) is not in $(TORCH_WHEELS) and $(TORCH_INDEX_URL) did not serve it with the hash in $(LOCK) (a lock for CPython 3.11 on Linux x86_64): put the wheel in a folder and run  make install TORCH_WHEELS=<folder>  (or TORCH_INDEX_URL=<a mirror of the PyTorch CPU index>)" >&2; exit 1; }
TORCH_LINKS :=
endif

.PHONY: install lock demo test test-fast bench clean

$(STAMP): pyproject.toml $(LOCK) $(if $(TORCH_WHEEL),,$(TORCH_REQ))
	@echo "$(TORCH) from $(TORCH_FROM)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(TORCH_FIRST)
	$(PIP) --require-hashes $(TORCH_LINKS) -r $(LOCK)
	$(PIP) --no-deps -e .
	touch $(STAMP)

$(TORCH_REQ): $(LOCK)
	@mkdir -p $(@D)
	@awk '/^torch==/ {keep = 1} keep && /^ *#/ {exit} keep' $(LOCK) > $@
	@grep -q -e '--hash=sha256:' $@ || { echo "$(LOCK) has no hashed $(TORCH) entry" >&2; exit 1; }

install: $(STAMP)

# The demo service: a port of its own and a throwaway token (never use it for a real service).
DEMO_PORT  ?= 8766
DEMO_TOKEN := demo-token-not-secret-0123456789

demo: install
	$(BIN)/hybridsag index samples/corpus
	@for q in "ReActAgent" "E-1234" "我的喜好" "how do I install it on Linux" "v2.3.1 release notes"; do \
		echo; echo "=== hybridsag search \"$$q\" -k 3"; \
		$(BIN)/hybridsag search "$$q" -k 3 || exit 1; \
	done
	@echo; echo "=== hybridsag serve (in the background; log in .hybridsag/serve.log), then the CLI as its client"
	@export HYBRIDSAG_SERVER__TOKEN=$(DEMO_TOKEN) HYBRIDSAG_SERVER__PORT=$(DEMO_PORT) \
		HYBRIDSAG_SERVER__RECONCILER=false; \
	$(BIN)/hybridsag serve > .hybridsag/serve.log 2>&1 & pid=$$!; \
	trap 'kill -TERM $$pid 2>/dev/null; wait $$pid; true' EXIT; \
	$(BIN)/python scripts/wait_ready.py http://127.0.0.1:$(DEMO_PORT) 180 \
		|| { echo "see .hybridsag/serve.log"; exit 1; }; \
	export HYBRIDSAG_SERVER__URL=http://127.0.0.1:$(DEMO_PORT) HYBRIDSAG_SERVER__CLIENT_TOKEN=$(DEMO_TOKEN); \
	for q in "ReActAgent" "我的喜好"; do \
		echo; echo "=== hybridsag --server http://127.0.0.1:$(DEMO_PORT) search \"$$q\" -k 3"; \
		$(BIN)/hybridsag search "$$q" -k 3 || exit 1; \
	done; \
	echo; echo "=== hybridsag --server ... reconcile --dry-run"; \
	$(BIN)/hybridsag reconcile --dry-run || exit 1; \
	echo; echo "=== stopping the service (SIGTERM: requests in flight finish first)"

# Regenerate $(LOCK) from pyproject.toml with uv in a throwaway venv (not the project's). uv reads
# the output file's pins as preferences, so the old lock, copied there first, keeps every pin that
# still satisfies pyproject.toml: a new extra adds its packages and moves no other. uv finds the
# locked torch in TORCH_WHEELS (only there or on PyTorch's index): make lock needs the wheel.
lock:
	tools=$$(mktemp -d) && trap 'rm -rf "$$tools"' EXIT && \
	$(PYTHON) -m venv "$$tools" && \
	"$$tools/bin/python" -m pip install --quiet --disable-pip-version-check $(UV) && \
	echo '$(TORCH)' > "$$tools/torch.txt" && \
	cp $(LOCK) $(LOCK).tmp && \
	"$$tools/bin/uv" pip compile pyproject.toml $(foreach e,$(EXTRAS),--extra $(e)) \
		--constraint "$$tools/torch.txt" --find-links $(TORCH_WHEELS) \
		--generate-hashes --python "$(PYTHON)" --no-header --quiet -o $(LOCK).tmp && \
	{ printf '%s\n' '# Generated by  make lock  from pyproject.toml (extras: $(EXTRAS)); do not edit.' \
		'# torch is the CPU build: make install takes it from TORCH_WHEELS or TORCH_INDEX_URL (the Makefile says how).'; \
	  cat $(LOCK).tmp; } > $(LOCK) && rm -f $(LOCK).tmp

# The suite runs in TEST_WORKERS processes (pytest-xdist; CI has 2 cores). --dist loadfile keeps
# each test module in one process, so a module's fixtures (a base index, a server) are built once.
# TEST_WORKERS=0 runs it in this process alone.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile)

test: install
	$(BIN)/python -m pytest tests -q $(XDIST) $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest tests -q $(XDIST) -m "not slow and not milvus_server" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .hybridsag build dist *.egg-info .pytest_cache
