# The two set-up commands of the README:
#   make demo   installs the runtime distributions into .venv and runs the main example job
#   make test   installs everything, then lint, type check, the docs site and the whole suite
# and for users outside this repository:
#   make dist   wheels and sdists of every distribution into dist/
#   make check-dist   each connector installed alone from them, with a small job
# (.ci/run calls `make test`). Tests start their own Kafka broker, Spark standalone
# cluster, S3 server and CQL test server, and stop them by PID. The broker is Apache
# Kafka from KAFKA_HOME, else ../shared/kafka beside this checkout, else the release
# downloaded once (FIRESTEEL_KAFKA_MIRROR, SHA-512 checked) into ~/.cache/firesteel:
# conftest.py settles it and names it in the run's header; none to be had stops the run.

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PYSPARK_PYTHON := $(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(BIN)/python

.PHONY: install install-runtime demo dist check-dist docs test test-fast lint typecheck pytest

$(BIN)/python:
	@command -v java >/dev/null || { echo "Java 11+ is required by Spark: install a JDK (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: $(BIN)/python
	$(BIN)/pip install -q uv

# Editable installs leave firesteel's modules uncompiled, and where PYTHONDONTWRITEBYTECODE
# is set (these machines) Python never caches their bytecode: every Python process Spark
# starts for a query compiled them again (~30 ms each, ~80 ms for a job's driver). Compile
# them once here; a module edited afterwards is compiled in memory as before.
SOURCES := core sources sinks state backends testing/src examples cli connectors/*/src pipelines/src
# firesteel-testing (./testing) is the test tooling of every distribution: the main
# distribution's and each connector's `test` extra depend on it.
# Azurite, the Azure Storage emulator of the storage tests, is an npm package: installed
# into .azurite/ where npm exists (else those tests are skipped, saying so).
AZURITE := azurite@3.37.0
# uv installs the same releases pip would, in a third of pip's time here (29 s against 76 s
# on a fresh clone, caches warm: issue 30's budget counts the install); Azurite's npm install
# runs meanwhile. Unlike pip, uv leaves the installed packages uncompiled unless told
# (--compile-bytecode), and with PYTHONDONTWRITEBYTECODE every Python process Spark starts
# then compiled PySpark, pyarrow and pandas again: the suite used 3,735 s of CPU instead of
# 2,516 (measured 2026-11-27 on a fresh clone against the pip-made venv).
AZURITE_STEP := if [ -x .azurite/node_modules/.bin/azurite-blob ]; then :; \
	elif command -v npm >/dev/null; then npm install -s --no-audit --no-fund --prefix .azurite $(AZURITE); \
	else echo "npm not found: the Azure storage tests will be skipped (they need $(AZURITE))"; fi
# The dashboard test drives Debian's chromium through Playwright (Playwright's own browser
# download cannot run here); installed with apt-get where it is missing and we are root.
CHROMIUM_STEP := if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	{ apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null 2>&1 || echo "apt-get install chromium failed"; \
	else echo "chromium not found: install Debian's chromium for the dashboard test"; fi
# PyPI has PySpark as a source distribution only, and uv built it again for every fresh
# clone (its cached build is revalidated and replaced each time: 57 builds, 52 GB of uv's
# cache, filled this machine's disk on 2026-11-29). pip builds its wheel once into
# ~/.cache/firesteel/wheels, and uv installs that wheel, found with --find-links.
WHEELS := $(HOME)/.cache/firesteel/wheels
PYSPARK := pyspark>=4.1,<5
PYSPARK_WHEEL_STEP := ls $(WHEELS)/pyspark-*.whl >/dev/null 2>&1 || \
	$(BIN)/python -m pip wheel -q --no-deps -w $(WHEELS) "$(PYSPARK)"
install: $(BIN)/uv
	@$(PYSPARK_WHEEL_STEP)
	@{ $(AZURITE_STEP); } & azurite=$$!; { $(CHROMIUM_STEP); } & chromium=$$!; \
	$(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode --find-links $(WHEELS) \
		-e ".[dev,test,connect,s3,metrics]" \
		-e "./testing[kafka,cassandra,pipelines]" -e "./connectors/kafka[test]" \
		-e "./connectors/_template[test]" -e "./connectors/cassandra[test]" \
		-e "./backends/rocksdb[test]" -e "./pipelines[test,kafka]" \
		|| { wait $$azurite $$chromium; exit 1; }; \
	wait $$azurite $$chromium
	$(BIN)/python -m compileall -q $(wildcard $(SOURCES))

# The demo needs the core distribution only (files, keyed state, the filesystem backend):
# no test tools, emulators or linters.
install-runtime: $(BIN)/uv
	@$(PYSPARK_WHEEL_STEP)
	$(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode --find-links $(WHEELS) -e .
	$(BIN)/python -m compileall -q $(wildcard $(SOURCES))

demo: install-runtime
	$(BIN)/firesteel demo

# Every distribution of the repository, each built in isolation: a connector's pin on
# firesteel then resolves from the same folder (pip install --find-links dist firesteel-kafka).
DISTRIBUTIONS := . connectors/kafka connectors/cassandra backends/rocksdb pipelines testing
dist: $(BIN)/uv
	rm -rf dist
	for d in $(DISTRIBUTIONS); do $(BIN)/uv build -q --out-dir dist $$d || exit 1; done

# Each distribution installed alone from those wheels into a fresh virtual environment
# with only PySpark, then a small job with it (firesteel.testing.dist). Minutes: it runs
# beside the soak commands, not in the suite.
check-dist: install
	$(BIN)/python -m firesteel.testing.dist

# lint-imports: the import contract of pyproject.toml ([tool.importlinter]): a separately
# installed distribution imports firesteel only through the SPI and the public user API.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The folders to check and where each package lives are in pyproject.toml ([tool.mypy]).
typecheck: install
	$(BIN)/mypy

# Two pytest-xdist workers, one test at a time each, slow tests first (conftest.py):
# the crash tests wait on JVM starts and kill points, so a second worker fills the idle
# CPU. Each worker starts its own broker, CQL server and Spark session on free ports.
# pytest-randomly shuffles the order within the slow and the quick tests each run (the
# header prints the seed; `--randomly-seed=N` repeats an order), so
# no test can lean on another having run first; -rs lists every skip with its reason.
PYTEST_WORKERS ?= 2
PYTEST_FLAGS := -p no:cacheprovider -rs -n $(PYTEST_WORKERS) --maxschedchunk 1
pytest: install
	$(BIN)/pytest $(PYTEST_FLAGS) --durations=40

# The documentation site (docs/, mkdocs.yml), built strictly: a broken link, anchor or
# missing page fails. tests/test_docs.py builds it too, so `make test` covers it.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -q

test: lint typecheck pytest

# The inner loop (README, Testing): everything but the crash, cluster and soak tests and
# the quick benchmark run, in under five minutes.
FAST_TESTS := not crash and not cluster and not soak and not slow
test-fast: install
	$(BIN)/pytest $(PYTEST_FLAGS) --durations=10 -m "$(FAST_TESTS)"
