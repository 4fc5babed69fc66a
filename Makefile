# syncfree — the two commands a new user needs are `make demo` and `make test`.
# Everything else here is what those two call. All set-up is idempotent: a fresh machine
# (Python 3.11, Node 20, root, no GPU) needs no step by hand.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1
# Versions we develop and test against. torch is pinned to the CPU build that installs
# from a local file here; an unpinned torch would pull several GB of CUDA packages.
# expecttest: torch.testing._internal imports it (tests/test_optable.py replays OpInfo samples).
# pytest-xdist: the pytest plugin's reports travel from -n workers (tests/test_pytest_plugin.py).
# pytest-asyncio: a marked `async def` test is watched though it runs in a copied context (tests/test_pytest_plugin.py).
DEV_PINS := jupyterlab==4.6.4 notebook==7.6.3 torch==2.13.0 ipykernel pytest jsonschema nbclient nbformat numpy \
	expecttest==0.3.0 pytest-xdist==3.8.0 pytest-asyncio==1.5.0 \
	hatchling hatch-jupyter-builder hatch-nodejs-version editables ruff==0.17.6
PIP := $(PY) -m pip --disable-pip-version-check -q
# Large libraries whose sources tests/test_check_precision.py and bench/check_precision.py read (never import):
# installed without their dependencies (timm's would pull torchvision, which must not be installed here), and
# without compiling their thousands of modules to bytecode at install (they are read, and the few imported compile then).
# accelerate: tests/test_library_sites.py checks that catalog/libraries names its real functions.
CORPUS_PINS := transformers==5.24.0 timm==1.0.31 torchmetrics==1.9.0 lightning==2.6.6 accelerate==1.15.0 diffusers==0.42.1 kornia==0.9.0 torch-geometric==2.8.1 monai==1.6.1 gpytorch==1.15.2 pyro-ppl==1.9.2 ultralytics==8.4.190 speechbrain==1.1.2 botorch==0.18.1 peft==0.21.2 pytorch-ignite==0.5.5 stable-baselines3==2.9.2 sentence-transformers==6.2.0 torchtune==0.6.1 torchrl==0.14.1 flair==0.15.1 captum==0.9.0 pytorch-metric-learning==2.9.0 trl==1.16.0 lightly==1.6.0 fastai==2.8.12 mosaicml==0.32.1 tianshou==2.0.1 mmengine==0.10.7 pykeen==1.11.1 skorch==1.4.0 neuralforecast==3.3.0
# The GPU machine has torch + CUDA but no IPython and no venv: test-gpu uses its python3.
GPU_PYTHON ?= python3

.PHONY: all setup build install demo lab test test-all test-setup test-py test-py-all test-js lint lint-py test-ui test-gpu bench bench-ui screenshots chromium catalog-table fixtures clean

all: install

$(VENV)/.deps: Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install $(DEV_PINS) > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	$(PIP) install --no-deps --no-compile $(CORPUS_PINS) > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	$(PY) -c "import torch, jupyterlab; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.deps node_modules/.installed

# The TypeScript library and the prebuilt labextension (python_helper/syncfree/labextension).
build: setup
	npm run build --silent

# Both distributions, editable: the kernel-side syncfree (pyproject.toml) and jupyterlab-syncfree
# (jupyterlab-syncfree/pyproject.toml), with the extension linked into the venv's JupyterLab.
install: build $(VENV)/.editable
	@# What `jupyter labextension develop` does, without its second pip install: link the
	@# built extension into the venv's JupyterLab.
	mkdir -p $(VENV)/share/jupyter/labextensions
	ln -sfn $(CURDIR)/python_helper/syncfree/labextension $(VENV)/share/jupyter/labextensions/jupyterlab-syncfree
	$(VENV)/bin/jupyter labextension list 2>&1 | grep -q "jupyterlab-syncfree.*enabled.*OK"

# Redone only when the packages' metadata changes (an editable install follows the sources by itself).
# jupyterlab-syncfree first: in a venv made before the split it still owns the `syncfree` script, which
# reinstalling it removes; syncfree then puts its own back.
# The link to the build goes first: an older install listed data files under it, and pip would delete
# them through the link (jupyterlab-syncfree/hatch_build.py keeps them out of editable installs now).
$(VENV)/.editable: $(VENV)/.deps pyproject.toml jupyterlab-syncfree/pyproject.toml jupyterlab-syncfree/hatch_build.py
	rm -f $(VENV)/share/jupyter/labextensions/jupyterlab-syncfree
	SKIP_JUPYTER_BUILDER=1 $(PIP) install --no-build-isolation --no-deps -e ./jupyterlab-syncfree > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	$(PIP) install --no-build-isolation --no-deps -e . > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	$(VENV)/bin/syncfree --version > /dev/null
	touch $@

demo: install
	@# Exit 1 means "syncs found" (for CI jobs): expected in the tour.
	$(VENV)/bin/syncfree run examples/tour.ipynb || [ $$? -eq 1 ]
	@echo
	@echo "Open the same notebook in JupyterLab:  make lab"
	@echo "(examples/tour-h200.ipynb is the same tour as measured on an NVIDIA H200: open it there too)"

lab: install
	$(VENV)/bin/jupyter lab examples/tour.ipynb $(if $(filter 0,$(shell id -u)),--allow-root,)

# The set-up's independent parts run side by side (the venv's pip, the two `npm ci`, chromium; -O keeps each
# one's output together), then the checks run one after another without redoing it (SET_UP=1: the build is not
# run twice). docs/development.md, "Tests", says what runs where and how long it takes.
test: test-setup
	$(MAKE) --no-print-directory SET_UP=1 lint-py test-py test-js test-ui

# make test plus the exhaustive sweeps (tests marked `exhaustive`): for a nightly run or the GPU machine.
test-all: test-setup
	$(MAKE) --no-print-directory SET_UP=1 lint-py test-py-all test-js test-ui

test-setup:
	$(MAKE) --no-print-directory -j4 -O install chromium ui-tests/node_modules/.installed

SET_UP ?=
INSTALLED := $(if $(SET_UP),,install)
BUILT := $(if $(SET_UP),,build)

# pytest-xdist workers: most tests wait on a subprocess (a kernel, a run, a torchrun job), so more workers than
# cores pay. --dist loadgroup keeps the tests of one xdist_group on one worker, one after another (the torchrun
# jobs: tests/conftest.py). PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 3
PYTEST_ARGS := tests -q -rs --durations=25 -n $(PYTEST_WORKERS) --dist loadgroup
test-py: $(INSTALLED)
	$(PY) -m pytest $(PYTEST_ARGS) -m "not exhaustive"

# SYNCFREE_LEAKS=1: tests/test_leaks.py interrupts at every engine line, not at a sample of them.
test-py-all: $(INSTALLED)
	SYNCFREE_LEAKS=1 $(PY) -m pytest $(PYTEST_ARGS)

test-js: $(BUILT) lint
	npx jest --silent=false

# Python: ruff's rules as configured in pyproject.toml ([tool.ruff]); `ruff check --fix .` fixes
# what it can (import order, unused imports).
lint-py: $(VENV)/.deps
	$(VENV)/bin/ruff check --quiet .

# TypeScript and CSS style: prettier and eslint (the JupyterLab extension template's
# configs); `npm run lint` fixes what they can.
lint: node_modules/.installed
	npm run --silent lint:check

chromium:
	@command -v chromium > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null; }

ui-tests/node_modules/.installed: ui-tests/package.json ui-tests/package-lock.json
	cd ui-tests && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test-ui: $(INSTALLED) chromium ui-tests/node_modules/.installed
	cd ui-tests && npx playwright test

# On a machine with a CUDA GPU (see docs/development.md, "GPU checks"). Prints a summary.
# GPU_TESTS picks files (the whole suite takes ~10 minutes on an H100); GPU_BENCH=0 skips the overhead benchmark.
GPU_TESTS ?= tests
GPU_BENCH ?= 1
GPU_LOG ?= /tmp/syncfree-gpu.log
test-gpu:
	@# pytest's own exit status decides; its log keeps every test's printed figures.
	PYTHONPATH=python_helper$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) -m pytest $(GPU_TESTS) -m gpu -rfEs -q -s -p no:cacheprovider > $(GPU_LOG) 2>&1 && status=0 || status=$$?; \
	grep -E "^(FAILED|ERROR|SKIPPED)|syncfree-gpu|passed|failed" $(GPU_LOG) || true; \
	if [ "$(GPU_BENCH)" = 1 ]; then PYTHONPATH=python_helper$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) bench/overhead.py; fi; \
	exit $$status

# Every benchmark that runs here prints its figures; the GPU ones say so and measure
# nothing without CUDA (run them on a GPU machine: docs/development.md, "GPU checks").
BENCHES ?= $(wildcard bench/*.py)
bench: install
	@for script in $(BENCHES); do echo "== $$script"; $(PY) $$script || exit 1; echo; done

# The JupyterLab side on a 500-cell notebook (bench/ui/README.md): prints figures.
bench-ui: install chromium ui-tests/node_modules/.installed
	cd ui-tests && npx playwright test --config bench/playwright.config.js

# The screenshots of README.md and docs/ (docs/*.png) from the real tour (ui-tests/tests/screenshots.spec.ts) and a real 2-rank job (merged.spec.ts).
screenshots: install chromium ui-tests/node_modules/.installed
	cd ui-tests && SYNCFREE_SCREENSHOTS=1 npx playwright test tests/screenshots.spec.ts tests/merged.spec.ts

catalog-table: $(VENV)/.deps
	PYTHONPATH=python_helper $(PY) scripts/gen_catalog_table.py

# Regenerates the golden fixtures (tests/fixtures) and the UI tests' notebooks.
fixtures: $(VENV)/.deps
	PYTHONPATH=python_helper $(PY) scripts/regen_fixtures.py
	PYTHONPATH=python_helper $(PY) ui-tests/tests/notebooks/generate.py

clean:
	rm -rf lib tsconfig.tsbuildinfo python_helper/syncfree/labextension src/_report.ts src/_settings.ts src/_merged.ts ui-tests/test-results
