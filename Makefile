# Two commands do all set-up on a fresh machine:  make demo  and  make test.
# Install order matters: torch==2.13.0 first takes the CPU wheel; an unpinned torch (pulled in by
# sentence-transformers) would be a multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hybridsag-installed
PYTEST_ARGS ?=

.PHONY: install demo test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,server,formats,service]'
	touch $(STAMP)

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

test: install
	$(BIN)/python -m pytest tests -q $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest tests -q -m "not slow and not milvus_server" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .hybridsag build dist *.egg-info .pytest_cache
