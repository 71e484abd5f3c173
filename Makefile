.DEFAULT_GOAL := help
VENV ?= .venv

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

quickstart: ## set up and run the sample jobs on the embedded stack (Ctrl-C stops)
	./scripts/quickstart.sh

test: ## set up and run the whole suite (lint, types, import rules, unit and integration tiers)
	./scripts/test.sh

lint: ## ruff, mypy and the import rules
	$(VENV)/bin/ruff check jobservice workers tests scripts docs
	$(VENV)/bin/ruff format --check jobservice workers tests scripts docs/hooks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: ## ruff format and autofix
	$(VENV)/bin/ruff format jobservice workers tests scripts docs/hooks
	$(VENV)/bin/ruff check --fix jobservice workers tests scripts docs

docs: ## build the manual strictly into var/site (mkdocs; `.venv/bin/mkdocs serve -a 127.0.0.1:8001` to read it live)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: ## service overhead around warm reference jobs (scripts/bench_overhead.py)
	$(VENV)/bin/python scripts/bench_overhead.py

up: ## the embedded stack (API on :8000, one CPU worker)
	$(VENV)/bin/jobservice up

samples: ## remake samples/portrait.png and samples/speech.wav
	$(VENV)/bin/python scripts/make_samples.py

.PHONY: help quickstart test lint format docs bench up samples
