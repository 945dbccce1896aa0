# The two commands:  make tutorial  (set up + run the course headless)  |  make test  (set up + all tests)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PARAMS ?=
# make test's pytest-xdist workers (each test file, so each notebook, stays on one worker); 0: one process
TEST_WORKERS ?= 2

.PHONY: setup tutorial course test compat-setup test-compat mutants lab lint slurm-up slurm-down netlab-up netlab-down clean FORCE

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on --upgrade pip
	$(PY) -m pip install --progress-bar on -c constraints.txt -e '.[test]'
	$(PY) -m tutorial_lib.course.kernel >/dev/null
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install the package, test tools and a Jupyter kernel

tutorial: $(STAMP)  ## run the whole course headless (papermill) on the embedded defaults
	$(PY) -m tutorial_lib.course --out executed

course: $(STAMP)  ## rerun the course with a parameter file: make course PARAMS=notebooks/params/gpu.yaml
	@test -n "$(PARAMS)" || { echo "usage: make course PARAMS=notebooks/params/gpu.yaml"; exit 2; }
	$(PY) -m tutorial_lib.course --params $(PARAMS) --out executed-$(notdir $(basename $(PARAMS)))

test: $(STAMP)  ## run every test (notebooks: copies on tests/nbval_params.yaml, exact-checked outputs put back: tests/notebook_checks.py)
	$(PY) tests/notebook_checks.py prepare build/nbval
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 tests build/nbval --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --nbval-sanitize-with tests/nbval_sanitize.cfg

# Another torch/torchvision pair in its own venv, from the package registry like .venv, with the same other
# requirements: PAIR names one of tests/compat_plan.py's pairs (2.11: the GPU machine's, the lowest pyproject.toml
# admits), or TORCH=<version> TORCHVISION=<version> gives any other. test-compat runs the compat subset
# (tests/compat_plan.py) in it and appends a line to results/compat.jsonl.
PAIR ?= 2.11
TORCH ?=
TORCHVISION ?=
COMPAT_VENV := .venv-torch$(or $(TORCH),$(PAIR))
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_RECORD ?= results/compat.jsonl

$(COMPAT_VENV)/constraints.txt: FORCE  # rewritten only when the pair's pins change (then the venv is redone)
	@$(PYTHON) tests/compat_plan.py constraints --pair '$(PAIR)' --torch '$(TORCH)' --torchvision '$(TORCHVISION)' \
	    --out $@

$(COMPAT_VENV)/.installed: pyproject.toml $(COMPAT_VENV)/constraints.txt
	date +%s > $(COMPAT_VENV)/.install_started
	test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_PY) -m pip install --progress-bar off --upgrade pip
	$(COMPAT_PY) -m pip install --progress-bar off --no-compile --no-cache-dir -c $(COMPAT_VENV)/constraints.txt -e '.[test]'
	$(COMPAT_PY) -m tutorial_lib.course.kernel >/dev/null
	echo $$(( $$(date +%s) - $$(cat $(COMPAT_VENV)/.install_started) )) > $(COMPAT_VENV)/.install_seconds
	touch $@

compat-setup: $(COMPAT_VENV)/.installed  ## the venv of another pair: make compat-setup PAIR=2.11 (or TORCH=... TORCHVISION=...)

test-compat: $(COMPAT_VENV)/.installed  ## the compat subset on another pair: make test-compat PAIR=2.11
	$(COMPAT_PY) tests/notebook_checks.py prepare build/nbval-compat
	TUTORIAL_COMPAT_RECORD=$(COMPAT_RECORD) $(COMPAT_PY) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) \
	    --dist loadfile $$($(COMPAT_PY) tests/compat_plan.py tests --nbval-dir build/nbval-compat) \
	    --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --nbval-sanitize-with tests/nbval_sanitize.cfg

MUTANTS_ONLY ?=
mutants: $(STAMP)  ## mutation testing ([tool.mutmut] in pyproject.toml); some: make mutants MUTANTS_ONLY='tutorial_lib.engine.tally*'
	$(PY) -m pip install -q -c constraints.txt -e '.[mutants]'
	rm -rf mutants
	$(VENV)/bin/mutmut run --max-children 2 $(MUTANTS_ONLY); \
	$(VENV)/bin/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json && echo && $(VENV)/bin/mutmut results

lab: $(STAMP)  ## open JupyterLab on the course
	$(VENV)/bin/jupyter lab notebooks

lint: $(STAMP)
	$(VENV)/bin/ruff check tutorial_lib tests

slurm-up:  ## start the emulated two-node Slurm cluster (root, Debian: apt-get install slurm-wlm munge)
	bash cluster_scripts/start_local_slurm.sh

slurm-down:
	bash cluster_scripts/stop_local_slurm.sh

NODES ?= 2
RATE_MBIT ?= 200
netlab-up: $(STAMP)  ## an emulated two-level network (root): NODES namespaces, each node's port capped at RATE_MBIT
	$(PY) -m tutorial_lib.jobs.netlab up --nodes $(NODES) --rate-mbit $(RATE_MBIT)

netlab-down: $(STAMP)  ## remove it (and any lab whose owner process is gone)
	$(PY) -m tutorial_lib.jobs.netlab down

clean:
	rm -rf runs executed build .pytest_cache mutants

FORCE:
