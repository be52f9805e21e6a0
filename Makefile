# jobctl — the two set-up commands of the README:
#   make demo   installs what is missing, builds, runs jobs/demo.yaml on the embedded default, prints the audit
#   make test   installs what the tests need (Debian packages, a Python venv with the peers) and runs every test

SHELL := /bin/bash
.DEFAULT_GOAL := demo

BUILD_PACKAGES := libsqlite3-dev libcurl4-openssl-dev libyaml-dev libssl-dev libpq-dev
TEST_PACKAGES := $(BUILD_PACKAGES) nginx-light python3-venv postgresql
PYTHON ?= python3
VENV := .venv
PEERS := gcp-storage-emulator==2026.7.19 google-cloud-storage==3.17.1 huey==3.5.4 prometheus-client==0.26.0
DEMO_DIR := var/demo
JOBCTL := .build/release/jobctl

.PHONY: demo test deps test-deps venv build release clean bench

# Installs only the Debian packages that are missing (apt-get update only when something is).
define apt_install
	@missing=""; for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
endef

deps:
	$(call apt_install,$(BUILD_PACKAGES))

test-deps:
	$(call apt_install,$(TEST_PACKAGES))

venv: test-deps
	@if [ ! -x $(VENV)/bin/gcp-storage-emulator ] || ! $(VENV)/bin/python -c 'import google.cloud.storage, huey' 2>/dev/null; then \
	  echo "creating $(VENV) with the test peers"; \
	  $(PYTHON) -m venv $(VENV) && $(VENV)/bin/pip install -q --disable-pip-version-check $(PEERS); \
	fi

release: deps
	swift build -c release --product jobctl

build: deps
	swift build

## The main job on the embedded default: a SQLite file and a local file:// bucket under var/demo.
demo: release
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db submit jobs/demo.yaml
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db worker --drain --concurrency 1
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db audit
	@echo "fetch-url result:  $$($(JOBCTL) --db $(DEMO_DIR)/jobctl.db result $$($(JOBCTL) --db $(DEMO_DIR)/jobctl.db list --kind fetch-url --json | $(PYTHON) -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'))"
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db replay --verify

## Every test, against real SQLite files, nginx, the GCS emulator and a PostgreSQL the tests start, on 127.0.0.1.
test: venv
	swift build --build-tests
	swift test --skip-build 2>&1 | tee .build/test-output.txt; exit $${PIPESTATUS[0]}

BENCH_PACKAGES := curl rclone time

## Benchmarks against curl, rclone, cp and huey (BENCH_ARGS=--quick for a short run); see BENCHMARKS.md.
bench: venv release
	$(call apt_install,$(BENCH_PACKAGES))
	bench/run.sh $(BENCH_ARGS)

clean:
	rm -rf .build var
