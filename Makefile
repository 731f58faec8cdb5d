PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench score clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cdit-integrate analyze tests/fixtures/models/demo_mmdit.py
	$(BIN)/cdit-integrate analyze diffusers.models.transformers.transformer_flux \
		--class FluxTransformer2DModel --pipeline diffusers.pipelines.flux.pipeline_flux
	$(BIN)/cdit-integrate generate examples/demo/flux_answers.json \
		--manifest .cdit/demo/generated.json
	$(BIN)/cdit-integrate verify --tiny flux --integration .cdit/demo/flux_integration.py \
		--phases baseline,cache,ulysses --rdt 2 --ws 1 --out .cdit/demo/verify \
		> .cdit/demo/verify.events.jsonl
	@echo "images: .cdit/demo/verify/images  progress events: .cdit/demo/verify.events.jsonl"

test: $(STAMP)
	$(BIN)/ruff check lsp_server cdit_runtime tests benchmarks
	$(BIN)/ruff format --check lsp_server cdit_runtime tests benchmarks
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python benchmarks/analysis_speed.py

score: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python ../shared/tools/score_analysis.py

clean:
	rm -rf $(VENV)
