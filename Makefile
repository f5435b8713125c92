# make demo: renders every node family into output/   make test: the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

demo: $(VENV)/.installed
	$(PY) demo.py

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) output
