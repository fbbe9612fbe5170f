# Two commands do all the set-up on a fresh machine with Python 3.11 and pip:
#   make demo   -- solve the shipped default instance and compare with the hand-made schedules
#   make test   -- the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEFAULT := instances/default.yaml

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,torch,hf,titan]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/zbsolve solve $(DEFAULT) -o results/demo/schedule.json --time-limit 30
	$(VENV)/bin/zbsolve show $(DEFAULT) results/demo/schedule.json -o results/demo/timeline.png

test: $(STAMP)
	$(VENV)/bin/ruff check zbsolve tests
	$(PY) -c "import torch, nbclient, ipykernel, transformers, torchtitan"  # those tests must run, not skip
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(VENV)/bin/zbsolve bench

clean:
	rm -rf $(VENV)
