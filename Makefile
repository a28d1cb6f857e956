# The README's two commands: `make run` starts the whole system, `make test` runs the whole test suite.
# Needs nothing but python3 (3.11) on PATH: the first run creates .venv and installs the project into it.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
# This machine's pip configuration points at local mirrors that print one harmless line per package.
PIP_NOISE := WARNING: Location '.*' is ignored|^Looking in indexes|^Looking in links

.PHONY: help run test lint messages .venv clean-venv

help:
	@echo "make run    start PostgreSQL, Valkey, web, worker and beat (embedded servers unless DATABASE_URL/REDIS_URL)"
	@echo "make test   run the test suite (extra pytest arguments: make test ARGS=\"-k claim\")"
	@echo "make lint   ruff check + mypy"
	@echo "make messages  refresh the translation catalogs (locale/*/LC_MESSAGES/*.po) from the marked strings"
	@echo "make bench  the benchmark suite (~8 min; embedded servers unless DATABASE_URL/REDIS_URL; ARGS=\"--quick\")"

run: $(STAMP) gettext
	$(PY) -m devstack run $(ARGS)

# The whole check: lint (ruff, mypy) first, then the test suite.
test: lint gettext
	$(PY) -m devstack test $(ARGS)

# mypy's Django plugin imports the settings, which need a DATABASE_URL (it never connects).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	DATABASE_URL=$${DATABASE_URL:-postgres://lint@localhost/lint} $(VENV)/bin/mypy .

# The benchmark suite of issue 6 (bench/README.md): claim storm, selling, fixed rate, sold-out, drain, naive, Redis
# memory, expiry sweep, each beside its baseline; JSON + SVG in bench/results/. Installs the bench extra (py-spy).
.PHONY: bench
bench: $(STAMP)
	@test -x $(VENV)/bin/py-spy -a -x $(VENV)/bin/granian || { PYTHONWARNINGS=ignore $(PY) -m pip install -q -e '.[bench]' 2>&1 \
	  | { grep -Ev "$(PIP_NOISE)" || true; }; }
	$(PY) bench/suite.py $(ARGS)

# The translation catalogs (docs/glossary.md): makemessages rewrites locale/<lang>/LC_MESSAGES/django.po and
# djangojs.po from the strings marked in the code, templates and static/storefront/app.js; translate the new
# msgids in zh_Hans, commit the .po. The .mo are compiled by `make run` / `make test` (devstack) and the image.
# Needs Debian's gettext (apt-get install gettext).
MESSAGES_ARGS := -l en -l zh_Hans --no-location --no-wrap --ignore 'var/*' --ignore 'tests/*' --ignore 'bench/*' --ignore 'docs/*'
messages: $(STAMP)
	DJANGO_SETTINGS_MODULE=config.settings.base $(PY) manage.py makemessages $(MESSAGES_ARGS)
	DJANGO_SETTINGS_MODULE=config.settings.base $(PY) manage.py makemessages -d djangojs $(MESSAGES_ARGS)

.venv: $(STAMP)

# The console's translations are compiled at each start (devstack) with Debian's gettext (msgfmt): installed here
# when it is missing on a Debian machine run as root, as .ci/run installs Chromium and nginx; otherwise a warning
# and the console stays English.
.PHONY: gettext
gettext:
	@command -v msgfmt >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's gettext (the console's translations) ..."; \
	  { apt-get update -qq && apt-get install -y -qq gettext >/dev/null; } \
	    || echo "WARNING: could not install gettext: the console stays English" >&2; \
	  else echo "WARNING: msgfmt is missing (apt-get install gettext): the console stays English" >&2; fi; }

# Re-installs whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || { \
	  $(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
	    || { echo "couponrush needs Python 3.11: make PYTHON=/path/to/python3.11" >&2; exit 1; }; \
	  echo "creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing the project and its dependencies into $(VENV) ..."
	@$(PY) -m pip install -q --upgrade pip 2>&1 | { grep -Ev "$(PIP_NOISE)" || true; }
	@PYTHONWARNINGS=ignore $(PY) -m pip install -q -e '.[dev]' 2>&1 | { grep -Ev "$(PIP_NOISE)" || true; }
	@touch $@

clean-venv:
	rm -rf $(VENV)
