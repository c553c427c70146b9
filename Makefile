# The two commands of the quick start are `make demo` and `make test`; both bootstrap first.
SHELL := /bin/bash
PY := .venv/bin/python
SCENARIO ?= burst
SPEED ?=

.PHONY: bootstrap demo test bench checkov azurite sandbox run clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	$(PY) -m devtools.demo --scenario $(SCENARIO) $(if $(SPEED),--speed $(SPEED))

test: bootstrap
	$(PY) -m pytest -n auto --dist loadfile --durations=20

# Figures, not assertions: trace replays of every policy, the engine at scale, cold start (docs/benchmarks.md).
bench: bootstrap
	$(PY) -m devtools.replay suite

# Static security checks of infra/ (checkov in its own .venv-checkov: its pins clash with ours).
checkov:
	@scripts/checkov.sh

# Building blocks for running the app by hand (docs/local-development.md).
azurite: bootstrap
	$(PY) -m devtools.azurite

sandbox: bootstrap
	$(PY) -m sandbox serve --scenario $(SCENARIO) --speed 1 --workdir out/sandbox

run: bootstrap
	$(PY) -m devtools.runner --settings local.settings.json

clean:
	rm -rf out .pytest_cache .import_linter_cache
