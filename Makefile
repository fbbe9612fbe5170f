# Two commands do all the set-up on a fresh machine with Python 3.11 and pip:
#   make demo   -- solve the shipped default instance and compare with the hand-made schedules
#   make test   -- the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEFAULT := instances/default.yaml

.PHONY: demo test lint bench notebook clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,torch,ray,hf,titan]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/zbsolve solve $(DEFAULT) -o results/demo/schedule.json --time-limit 30
	$(VENV)/bin/zbsolve show $(DEFAULT) results/demo/schedule.json -o results/demo/timeline.png

test: $(STAMP)
	$(VENV)/bin/ruff check zbsolve tests examples
	$(PY) -c "import torch, nbclient, ipykernel, ray, transformers, torchtitan"  # those tests must run, not skip
	$(PY) -m pytest -q -p no:cacheprovider --durations=20  # the slowest: the suite must stay under 15 min

bench: $(STAMP)  # writes a new ./zbsolve-bench-DATE-TIME/ (--out results/bench refreshes the committed run)
	$(VENV)/bin/zbsolve bench

notebook: $(STAMP)  # run notebooks/walkthrough.ipynb again and keep its outputs in the file
	MPLBACKEND=Agg $(PY) -c "import nbformat; from nbclient import NotebookClient; \
	p = 'notebooks/walkthrough.ipynb'; nb = nbformat.read(p, as_version=4); \
	NotebookClient(nb, kernel_name='python3', timeout=300).execute(); nbformat.write(nb, p)"

clean:
	rm -rf $(VENV)
