PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cdit-integrate analyze tests/fixtures/models/demo_mmdit.py
	$(BIN)/cdit-integrate analyze --diffusers transformer_flux --class FluxTransformer2DModel

test: $(STAMP)
	$(BIN)/ruff check lsp_server cdit_runtime tests
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python benchmarks/analysis_speed.py

clean:
	rm -rf $(VENV)
