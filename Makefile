# One check for developers and CI: lint, types, import contracts, tests.
PY ?= python
.PHONY: check lint types contracts test bench fuzz
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
# The fuzzing harness at 20x its CI budget: 10,600 mutated traces, arguments, configs and CSVs (~10 min).
fuzz:
	FUZZ_SCALE=20 $(PY) -m pytest tests/test_fuzz_trace.py tests/test_fuzz_args.py -q
