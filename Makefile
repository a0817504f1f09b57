# One check for developers and CI: lint, types, import contracts, tests.
PY ?= python
.PHONY: check lint types contracts test bench fuzz
check: lint types contracts test
lint:
	$(PY) -m ruff check src tests bench data-build
types:
	$(PY) -m mypy
contracts:
	$(dir $(shell command -v $(PY)))lint-imports
# Two test workers (pytest-xdist): this machine has 2 cores. Compiled modules are kept between runs even where
# PYTHONDONTWRITEBYTECODE is set (pytest rewrites the asserts of ~250 test modules in each worker otherwise: ~4 CPU s
# a worker), outside the tree: .pytest_cache/pycache (git ignores it).
PYCACHE ?= $(CURDIR)/.pytest_cache/pycache
test:
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(PYCACHE) $(PY) -m pytest -n 2 --dist worksteal
bench:
	$(PY) bench/bench_trace.py
	$(PY) bench/bench_model.py
	$(PY) bench/bench_speculative.py
# The fuzzing harness at 28x its CI budget: 10,360 mutated traces + 4,480 arguments, configs and CSVs + 9,072 result
# files, replays, engine logs, routing files, plans and campaign logs (issue 32); and every
# command (and a local Ray) traced in a network namespace: no socket beyond loopback; 5 M tiny kernels within 1.5x.
fuzz:
	FUZZ_SCALE=28 $(PY) -m pytest tests/fuzz/test_fuzz_trace.py tests/fuzz/test_fuzz_args.py tests/fuzz/test_fuzz_memory.py tests/fuzz/test_fuzz_readers.py tests/cli/test_cli_network.py -q
