# make demo: renders every node family into output/   make test: lint, then the test suite (what CI runs)
# make lint: ruff's checks and formatting (pyproject.toml's [tool.ruff])
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# An index for torch alone, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu where the registry would
# give a multi-GB CUDA build (Linux with PyPI); empty: torch comes from the registry like the rest
TORCH_INDEX ?=

.PHONY: demo lint test bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(PY) -m pip install -q --index-url $(TORCH_INDEX) "$$(grep -m1 '^torch==' requirements-dev.txt)")
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

demo: $(VENV)/.installed
	$(PY) demo.py

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) output
