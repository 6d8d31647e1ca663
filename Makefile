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
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,server,formats,onnx]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/hybridsag index samples/corpus
	@for q in "ReActAgent" "E-1234" "我的喜好" "how do I install it on Linux" "v2.3.1 release notes"; do \
		echo; echo "=== hybridsag search \"$$q\" -k 3"; \
		$(BIN)/hybridsag search "$$q" -k 3 || exit 1; \
	done

test: install
	$(BIN)/python -m pytest tests -q $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest tests -q -m "not slow and not milvus_server" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .hybridsag build dist *.egg-info .pytest_cache
