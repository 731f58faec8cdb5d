PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench score clean ext ext-check e2e e2e-tools editor

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,runtime]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cdit-integrate analyze tests/fixtures/models/demo_mmdit.py
	$(BIN)/cdit-integrate analyze diffusers.models.transformers.transformer_flux \
		--class FluxTransformer2DModel --pipeline diffusers.pipelines.flux.pipeline_flux
	$(BIN)/cdit-integrate generate examples/demo/flux_answers.json \
		--manifest .cdit/demo/generated.json
	$(BIN)/cdit-integrate verify --tiny skimage-dit --integration .cdit/demo/flux_integration.py \
		--phases baseline,cache,ulysses --rdt 0.12 --ws 4 --out .cdit/demo/verify \
		> .cdit/demo/verify.events.jsonl
	@echo "images: .cdit/demo/verify/images  progress events: .cdit/demo/verify.events.jsonl"

test: $(STAMP)
	$(BIN)/ruff check lsp_server cdit_runtime tests benchmarks
	$(BIN)/ruff format --check lsp_server cdit_runtime tests benchmarks
	$(MAKE) --no-print-directory ext-check
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(MAKE) --no-print-directory e2e

bench: $(STAMP)
	$(BIN)/python benchmarks/analysis_speed.py

score: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python ../shared/tools/score_analysis.py

clean:
	rm -rf $(VENV)

# ---- VS Code extension (TypeScript, Node 20; see docs/extension.md) ------------------------------
NPM_STAMP := node_modules/.installed
VSIX := build/cdit-integrator.vsix

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

# type check (strict), eslint --max-warnings=0 + prettier, unit tests (node:test, no download)
ext-check: $(NPM_STAMP)
	npm run --silent typecheck
	npm run --silent lint
	npm run --silent test:unit

$(VSIX): $(NPM_STAMP) package.json $(shell find extension/src extension/media snippets lsp_server cdit_runtime -type f -not -path '*/__pycache__/*' 2>/dev/null)
	npm run --silent package

# everything above plus the .vsix (bundled extension + the Python package)
ext: ext-check $(VSIX)

# chromium (apt), Node 24 and code-server (npm) for the e2e test and the editor
e2e-tools:
	bash e2e/setup.sh

# Playwright drives a real VS Code (code-server) through the whole workflow; screenshots in
# build/e2e/shots
e2e: $(STAMP) $(VSIX) e2e-tools
	bash e2e/run.sh

# code-server with the extension on the example workspace; prints the URL
editor: $(STAMP) $(VSIX) e2e-tools
	bash e2e/editor.sh
