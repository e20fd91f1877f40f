# pgflow-wasm: the two commands in the README are `make run` and `make test`.
# Toolchains and example modules: mk/toolchains.mk and mk/examples.mk.
# Database pieces (npm-pinned pgflow schema, local cluster): mk/db.mk.
# The JavaScript engine of TypeScript handlers (QuickJS-NG from the Go module proxy): mk/jsengine.mk.

SHELL := /bin/bash
GO ?= go
# wasmtime is the second engine (cgo, static libraries from the Go module proxy).
TAGS ?= wasmtime
BIN := bin/pgflow-wasm

.PHONY: all build test test-browser run bench vet fmt-check deps modules clean
all: build

# The dashboard's browser tests (chromedp) are a Go module of their own, so that importers
# of pgflow-wasm do not inherit chromedp: `go test ./...` at the root does not reach them.
BROWSER_MODULE := internal/dashboard/browsertest

include $(wildcard mk/*.mk)

build: $(PGFLOW_SQL)
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/pgflow-wasm

# Everything a test or a run needs that is built from source or fetched by a registry:
# toolchains (mk/toolchains.mk), the pinned pgflow schema (mk/db.mk), example and test modules
# and the JavaScript engine (mk/jsengine.mk adds it to modules and build).
deps: toolchains node_modules $(PGFLOW_SQL)
modules: examples testmodules sandbox-testdata

# The worker's suites run again on databases that plan like aged ones: a statement whose
# meaning depends on its plan passes on fresh clones (internal/testkit/pgtest/plan.go).
# The worker's machinery: every package that reads or writes pgflow's tables while serving.
WORKER_SUITES := ./internal/worker/... ./internal/poller/... ./internal/completer/... ./internal/recovery/... ./internal/compile/... ./internal/taskwrite/... ./internal/liveness/...
PLAN_SUITES := $(WORKER_SUITES) ./internal/store/... ./internal/testkit/pgtest/...

# The instrumenter is single-threaded code that compiles every module the repository builds
# twice: under the race detector that took 3-5 minutes of the CI's 2 cores and found nothing
# a race could; it runs without it.
NO_RACE_PKGS := ./sandbox/internal/instrument/
test: deps modules
	$(MAKE) vet fmt-check
	$(GO) test -race -tags '$(TAGS)' -timeout 25m $$($(GO) list ./... | grep -v /sandbox/internal/instrument$$)
	$(GO) test -tags '$(TAGS)' -timeout 10m $(NO_RACE_PKGS)
	$(MAKE) test-browser
	@# A project of `pgflow-wasm new` per language, built with real toolchains: alone, so its
	@# builds do not load the machine under other packages' timing tests (internal/scaffold/project_test.go).
	PGFLOW_WASM_TEST_PROJECTS=1 $(GO) test -tags '$(TAGS)' -timeout 15m -run TestNewProjectsBuildTestAndRun ./internal/scaffold/
	@# Aged statistics alone on the worker's machinery; aged and no index scans on everything
	@# that reads or writes pgflow's tables (the commands' end-to-end tests drive the same code).
	PGTEST_PLAN=aged $(GO) test -tags '$(TAGS)' -timeout 15m $(WORKER_SUITES) ./internal/store/...
	PGTEST_PLAN=aged,noindex $(GO) test -tags '$(TAGS)' -timeout 15m $(PLAN_SUITES)
	$(MAKE) test-image test-chart
	$(MAKE) test-real-pgmq
	$(MAKE) test-pgflow-014
	$(MAKE) test-pgflow-main
	@echo "make test: passed. The tests' PostgreSQL in .pgdata is left running for the next run; bin/pgflow-wasm localdb down stops it."

# What ships (docs/deploy.md): the image of `make image` run by podman against a test
# database (skipped, saying why, where containers cannot run), and the Helm chart rendered,
# linted and decoded strictly into the Kubernetes, Prometheus operator and KEDA types (a Go
# module of its own: the worker's module does not depend on Helm). The systemd unit and the
# chart's KEDA query are tested in ./deploy with everything else.
.PHONY: test-image test-chart
test-image: image
	PGFLOW_WASM_IMAGE_ARCHIVE=$(CURDIR)/$(IMAGE_TAR) $(GO) test -count=1 -v -run TestImageServesAFlow ./deploy/
test-chart:
	cd deploy/helm/chart_test && $(GO) vet . && $(GO) test -timeout 15m .

# The worker's suites once more on pgflow 0.14.1 and on pgflow's main of 2026-10-01 (0.17.0
# and after): their migrations are test data beside the repository, in ../shared (npm serves
# only 0.8.1), and every test database is then that release.
PGFLOW_014 ?= ../shared/pgflow/0.14.1/migrations
PGFLOW_MAIN ?= ../shared/pgflow/main-20261001/migrations
PGFLOW_VERSION_SUITES := $(WORKER_SUITES) ./cmd/... ./internal/store/... ./internal/dashboard/... ./internal/retention/... .
.PHONY: test-pgflow-014 test-pgflow-main
test-pgflow-014:
	@$(MAKE) --no-print-directory test-pgflow-release RELEASE=0.14.1 MIGRATIONS=$(PGFLOW_014)
test-pgflow-main:
	@$(MAKE) --no-print-directory test-pgflow-release RELEASE=main-20261001 MIGRATIONS=$(PGFLOW_MAIN)
.PHONY: test-pgflow-release
test-pgflow-release:
	@if [ ! -d $(MIGRATIONS) ]; then \
		echo "test-pgflow-release: skipped $(RELEASE): no migrations in $(MIGRATIONS) (test data beside the repository)"; exit 0; fi; \
	echo "the worker's suites on pgflow $(RELEASE)"; \
	migrations=$$(cd $(MIGRATIONS) && pwd); \
	PGFLOW_WASM_MIGRATIONS=$$migrations $(GO) test -tags '$(TAGS)' -timeout 15m $(PGFLOW_VERSION_SUITES) && \
	cd $(BROWSER_MODULE) && PGFLOW_WASM_MIGRATIONS=$$migrations $(GO) test -tags '$(TAGS)' -timeout 15m ./...

# The fault suite at full length: a full disk under pgflow's tables, no connections left and a failover
# for 60 s each, and the soak (kill -9, crash-restart) for 5 minutes. `make test` runs the
# same tests in a short form (8 s faults, a 30 s soak).
.PHONY: test-faults
test-faults: deps modules build
	FAULT_SECONDS=60 SOAK_SECONDS=300 $(GO) test -tags '$(TAGS)' -count=1 -timeout 30m -v \
		-run 'TestADiskFullUnderLoadCostsNoRun|TestNoConnectionsLeftCostsNoRun|TestAFailoverToAStandbyLosesNoRun|TestSoakKillAndCrashLoseNothingAndWriteEachOutcomeOnce' ./cmd/pgflow-wasm/

# The schedule test in the issue's form: three workers on "* * * * *" for 5 minutes, one
# killed with SIGKILL halfway; exactly one run per tick. `make test` runs it a tick a second.
.PHONY: test-schedule
test-schedule: deps modules build
	PGFLOW_WASM_SCHEDULE_MINUTES=5 $(GO) test -tags '$(TAGS)' -count=1 -timeout 15m -v \
		-run TestAScheduleStartsOneRunPerTickAcrossWorkers ./cmd/pgflow-wasm/

# The database suites once more on a server that offers the real pgmq 1.5.1 (test data kept
# beside the repository in ../shared, never copied into it): a cluster of its own, given to
# the tests as an outside server (TEST_DATABASE_URL), stopped afterwards.
REAL_PGMQ ?= ../shared/pgmq/1.5.1
REAL_PGMQ_CLUSTER ?= .pgdata-real-pgmq
# ./deploy/: the chart's KEDA query on the real pgmq's tables too.
DB_SUITES := ./schema/... $(WORKER_SUITES) ./internal/store/... ./internal/testkit/pgtest/... ./internal/retention/... ./deploy/
.PHONY: test-real-pgmq
test-real-pgmq: build
	@if [ ! -f $(REAL_PGMQ)/pgmq.control ]; then \
		echo "test-real-pgmq: skipped: no real pgmq in $(REAL_PGMQ) (its pgmq.control and pgmq--1.5.1.sql)"; exit 0; fi; \
	url=$$($(BIN) localdb up --dir $(REAL_PGMQ_CLUSTER) --extensions $(REAL_PGMQ)) || exit 1; \
	TEST_DATABASE_URL=$$url $(GO) test -tags '$(TAGS)' -timeout 15m $(DB_SUITES); rc=$$?; \
	$(BIN) localdb down --dir $(REAL_PGMQ_CLUSTER) >/dev/null; exit $$rc

run: deps examples build
	$(GO) build -o bin/demoapi ./scripts/demoapi
	BIN=$(BIN) scripts/run-examples.sh

vet:
	$(GO) vet -tags '$(TAGS)' ./...
	cd $(BROWSER_MODULE) && $(GO) vet -tags '$(TAGS)' ./...

# The browser tests' module: chromium drives the dashboard against a real database.
test-browser: deps modules
	cd $(BROWSER_MODULE) && $(GO) test -race -tags '$(TAGS)' -timeout 15m ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin

# The benchmark (issue: docs/benchmarks.md): every contender, every shape, fsync on and off.
# BENCH_ARGS=--quick for a few minutes instead of ~15.
# The benchmark is a command of its own (cmd/pgflow-wasm-bench): nothing of it is in bin/pgflow-wasm.
bench: deps examples build
	$(GO) build -o bin/pgflow-wasm-bench ./cmd/pgflow-wasm-bench
	bin/pgflow-wasm-bench $(BENCH_ARGS)
