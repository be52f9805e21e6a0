# jobctl — the two set-up commands of the README:
#   make demo   installs what is missing, builds, runs jobs/demo.yaml on the embedded default, prints the audit
#   make test   installs what the tests need (Debian packages, a Python venv with the peers) and runs every test

SHELL := /bin/bash
.DEFAULT_GOAL := demo

BUILD_PACKAGES := libsqlite3-dev libcurl4-openssl-dev libyaml-dev libssl-dev libpq-dev zlib1g-dev
TEST_PACKAGES := $(BUILD_PACKAGES) nginx-light python3-venv postgresql systemd bash-completion zsh faketime strace
PYTHON ?= python3
VENV := .venv
PEERS := gcp-storage-emulator==2026.7.19 google-cloud-storage==3.17.1 huey==3.5.4 prometheus-client==0.26.0 cryptography==50.0.2
DEMO_DIR := var/demo
JOBCTL := .build/release/jobctl

.PHONY: demo test deps test-deps venv build release clean bench install uninstall fuzz

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
	@if [ ! -x $(VENV)/bin/gcp-storage-emulator ] || ! $(VENV)/bin/python -c 'import google.cloud.storage, huey, prometheus_client, cryptography' 2>/dev/null; then \
	  echo "creating $(VENV) with the test peers"; \
	  $(PYTHON) -m venv $(VENV) && $(VENV)/bin/pip install -q --disable-pip-version-check $(PEERS); \
	fi

## The release binary carries the Swift runtime and Foundation inside it (--static-swift-stdlib): it runs
## where only Debian's C libraries are installed (no Swift toolchain on the host), starts faster (fewer
## shared objects to bind) and makes direct calls into the runtime.
release: deps
	swift build -c release --product jobctl --static-swift-stdlib

build: deps
	swift build

## The main job on the embedded default: a SQLite file and a local file:// bucket under var/demo.
demo: release
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db submit jobs/demo.yaml
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db worker --drain
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db audit
	@echo "fetch-url result:  $$($(JOBCTL) --db $(DEMO_DIR)/jobctl.db result $$($(JOBCTL) --db $(DEMO_DIR)/jobctl.db list --kind fetch-url --json | $(PYTHON) -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'))"
	$(JOBCTL) --db $(DEMO_DIR)/jobctl.db replay --verify

## Every test, against real SQLite files, nginx, the GCS emulator and a PostgreSQL the tests start, on 127.0.0.1.
## At most TEST_WIDTH tests run at once (four a core by default), each on a thread of its own (see
## Tests/TestSupport/TestThreads.swift): unbounded, every suite started its servers and processes at once
## (load average 43 on two cores, and a hang).
## A test running longer than JOBCTL_TEST_STUCK_SECONDS is named while it runs, with what its processes
## wait on, and at twice that the test process aborts with every thread's stack (Tests/TestSupport/
## StuckTests.swift); TEST_TIME_LIMIT ends the whole run whatever hangs, naming the tests it left running.
TEST_WIDTH ?= $(shell echo $$(( $$(nproc) * 4 )))
TEST_TIME_LIMIT ?= 40m
test: venv
	swift build --build-tests
	@# The release binary too (what `make demo` and `make install` build): its whole-module compile
	@# finds what the debug build lets through (an import another file of the module made).
	swift build -c release --product jobctl --static-swift-stdlib
	@rm -f .build/stuck-tests.txt
	timeout --kill-after=30s $(TEST_TIME_LIMIT) swift test --skip-build --experimental-maximum-parallelization-width $(TEST_WIDTH) 2>&1 | tee .build/test-output.txt; rc=$${PIPESTATUS[0]}; \
	if [ $$rc != 0 ]; then echo "=== what failed (from .build/test-output.txt) ==="; \
	  grep -E -A2 "recorded an issue|Fatal error|signal code|running longer than|still running after" .build/test-output.txt | head -40; \
	  echo "=== tests started and not ended ==="; bash .ci/unfinished-tests .build/test-output.txt | head -100; \
	  [ ! -s .build/stuck-tests.txt ] || { echo "=== stuck tests reported while they ran ==="; head -c 20000 .build/stuck-tests.txt; }; \
	  if [ $$rc = 124 ] || [ $$rc = 137 ]; then echo "=== the run passed TEST_TIME_LIMIT ($(TEST_TIME_LIMIT)) and was stopped; what still ran ==="; \
	    session=$$(ps -o sid= -p $$$$ | tr -d " "); ps -s $$session -o pid,ppid,stat,wchan:24,etime,args --forest | sed -E 's#(://[^:/@ ]+:)[^@ ]+@#\1***@#g' | cut -c1-250 | head -200; \
	    pkill -KILL -s $$session -f jobctlPackageTests.xctest; sleep 1; pkill -KILL -s $$session -f "$(CURDIR)/.build/debug/jobctl"; fi; fi; \
	exit $$rc

## Coverage-guided fuzzing (libFuzzer, AddressSanitizer) of what jobctl reads: the manifest, the
## configuration file, sizes, durations and times, references and URLs, redaction, terminal/CSV/JSON
## escaping, the store's JSON, file:// sidecars, HTTP answers (headers, GCS JSON, whole answers from a
## loopback server), archive files, the command line, requests to the metrics server and the inspection
## commands on a log holding odd values (Tests/Fuzz/main.swift says how to run one parser by hand).
## Built apart from the normal build (JOBCTL_FUZZ=1, in FUZZ_DIR); each parser runs FUZZ_SECONDS, its
## corpus kept in FUZZ_DIR/corpus/NAME and any input that crashes or hangs it written to
## FUZZ_DIR/crashes/NAME/. FUZZ_TARGETS=manifest,config runs only those. Fails when any parser crashed.
## Run it as e.g. `make fuzz FUZZ_TARGETS=database,storejson FUZZ_SECONDS=360` (or FUZZ_DIR=/some/dir to keep
## the build, corpus and crashes elsewhere); replay one saved input with
## `$(FUZZ_DIR)/build/release/jobctl-fuzz --target=NAME FILE` (ASAN_OPTIONS=detect_leaks=0 SWIFT_BACKTRACE=enable=no).
FUZZ_SECONDS ?= 60
FUZZ_DIR ?= .build/fuzz
FUZZ_TARGETS ?= manifest config numbers reference redaction text storejson sidecar httpheaders gcsjson archive arguments httplive metrics database
FUZZ_BINARY := $(FUZZ_DIR)/build/release/jobctl-fuzz
comma := ,
fuzz: deps
	JOBCTL_FUZZ=1 swift build -c release --product jobctl-fuzz --scratch-path $(FUZZ_DIR)/build
	@failed=""; for target in $(subst $(comma), ,$(FUZZ_TARGETS)); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$target $(FUZZ_DIR)/crashes/$$target; \
	  if [ "$$target" = manifest ] && [ -z "$$(ls -A $(FUZZ_DIR)/corpus/manifest)" ]; then cp jobs/*.yaml $(FUZZ_DIR)/corpus/manifest/; fi; \
	  echo "=== fuzzing $$target for $(FUZZ_SECONDS)s"; \
	  ASAN_OPTIONS=detect_leaks=0 SWIFT_BACKTRACE=enable=no $(FUZZ_BINARY) --target=$$target $(FUZZ_DIR)/corpus/$$target -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=5 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/crashes/$$target/ \
	    > $(FUZZ_DIR)/$$target.log 2>&1 || failed="$$failed $$target"; \
	  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+.*DONE" $(FUZZ_DIR)/$$target.log | tr '\n' ' '; echo; \
	done; \
	if [ -n "$$failed" ]; then echo "crashed:$$failed (inputs in $(FUZZ_DIR)/crashes/, logs in $(FUZZ_DIR)/NAME.log)"; exit 1; fi

BENCH_PACKAGES := curl rclone time

## Benchmarks against curl, rclone, cp and huey (BENCH_ARGS=--quick for a short run); see BENCHMARKS.md.
bench: venv release
	$(call apt_install,$(BENCH_PACKAGES))
	bench/run.sh $(BENCH_ARGS)

## Installation: the release binary, the worker's systemd unit (one instance per queue), its system user,
## the man page and shell completions generated by the binary itself. PREFIX and DESTDIR as usual;
## BINARY=path installs an already built binary (INSTALL_BUILD= then skips the release build).
PREFIX ?= /usr/local
DESTDIR ?=
BINARY ?= $(JOBCTL)
INSTALL_BUILD ?= release
BINDIR := $(PREFIX)/bin
MANDIR := $(PREFIX)/share/man/man1
UNITDIR := $(PREFIX)/lib/systemd/system
SYSUSERSDIR := $(PREFIX)/lib/sysusers.d
BASHCOMPDIR := $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR := $(PREFIX)/share/zsh/site-functions
DOCDIR := $(PREFIX)/share/doc/jobctl
INSTALLED := $(BINDIR)/jobctl $(MANDIR)/jobctl.1 $(UNITDIR)/jobctl-worker@.service $(SYSUSERSDIR)/jobctl.conf \
	$(BASHCOMPDIR)/jobctl $(ZSHCOMPDIR)/_jobctl $(DOCDIR)/worker.env.example

## PREFIX/bin goes into the unit's ExecStart=, where systemd reads % as a specifier (%v: the kernel's release), $
## as a variable and a space as the end of the path, and sed reads & and |; PREFIX and DESTDIR go into every
## install and rm command below. A path with any other character than these is refused before anything is
## installed or removed, not mangled. The check reads them from the environment: pasted into its shell code,
## a quote in one ended the command in a syntax error, and a backquoted command in it ran.
PATH_CHARACTERS := A-Za-z0-9/._+:@~-
install uninstall: export JOBCTL_INSTALL_BINDIR = $(BINDIR)
install uninstall: export JOBCTL_INSTALL_DESTDIR = $(DESTDIR)
define check_install_paths
	@case "$$JOBCTL_INSTALL_BINDIR" in /*) ;; *) printf '%s\n' "make $@: PREFIX must be an absolute path; the unit runs '$$JOBCTL_INSTALL_BINDIR/jobctl'" >&2; exit 2;; esac
	@case "$$JOBCTL_INSTALL_BINDIR" in *[!$(PATH_CHARACTERS)]*) printf '%s\n' "make $@: '$$JOBCTL_INSTALL_BINDIR' (PREFIX/bin) has a character the systemd unit cannot carry as it is; use letters, digits and / . _ + : @ ~ -" >&2; exit 2;; esac
	@case "$$JOBCTL_INSTALL_DESTDIR" in *[!$(PATH_CHARACTERS)]*) printf '%s\n' "make $@: DESTDIR '$$JOBCTL_INSTALL_DESTDIR' has a character the install commands cannot carry as it is; use letters, digits and / . _ + : @ ~ -" >&2; exit 2;; esac
endef

install: $(INSTALL_BUILD)
	$(check_install_paths)
	install -d -m 755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	  $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(DOCDIR)
	install -m 755 $(BINARY) $(DESTDIR)$(BINDIR)/jobctl
	$(BINARY) help --man > $(DESTDIR)$(MANDIR)/jobctl.1 && chmod 644 $(DESTDIR)$(MANDIR)/jobctl.1
	$(BINARY) completion bash > $(DESTDIR)$(BASHCOMPDIR)/jobctl && chmod 644 $(DESTDIR)$(BASHCOMPDIR)/jobctl
	$(BINARY) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_jobctl && chmod 644 $(DESTDIR)$(ZSHCOMPDIR)/_jobctl
	sed 's|@BINDIR@|$(BINDIR)|g' packaging/jobctl-worker@.service > $(DESTDIR)$(UNITDIR)/jobctl-worker@.service
	chmod 644 $(DESTDIR)$(UNITDIR)/jobctl-worker@.service
	install -m 644 packaging/jobctl.sysusers $(DESTDIR)$(SYSUSERSDIR)/jobctl.conf
	install -m 644 packaging/worker.env $(DESTDIR)$(DOCDIR)/worker.env.example
	@if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null && [ -d /run/systemd/system ]; then \
	  systemd-sysusers $(SYSUSERSDIR)/jobctl.conf && systemctl daemon-reload; \
	fi

uninstall:
	$(check_install_paths)
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null

clean:
	rm -rf .build var
