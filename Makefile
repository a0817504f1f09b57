# One check for developers and CI: lint, types, import contracts, tests.
PY ?= python
.PHONY: check lint types contracts test bench
check: lint types contracts test
lint:
	$(PY) -m ruff check src tests bench
types:
	$(PY) -m mypy
contracts:
	$(dir $(shell command -v $(PY)))lint-imports
test:
	$(PY) -m pytest
bench:
	$(PY) bench/bench_trace.py
	$(PY) bench/bench_model.py
