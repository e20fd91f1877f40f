# pgflow-wasm: the two commands in the README are `make run` and `make test`.
# Toolchains and example modules: mk/toolchains.mk and mk/examples.mk.
# Database pieces (npm-pinned pgflow schema, local cluster): mk/db.mk.

SHELL := /bin/bash
GO ?= go
# wasmtime is the second engine (cgo, static libraries from the Go module proxy).
TAGS ?= wasmtime
BIN := bin/pgflow-wasm

.PHONY: all build test run bench vet fmt-check deps modules clean
all: build

include $(wildcard mk/*.mk)

build:
	$(GO) build -tags '$(TAGS)' -o $(BIN) ./cmd/pgflow-wasm

# Everything a test or a run needs that is built from source or fetched by a registry:
# toolchains (mk/toolchains.mk), the pinned pgflow schema (mk/db.mk), example and test modules.
deps: toolchains node_modules
modules: examples testmodules sandbox-testdata

test: deps modules
	$(MAKE) vet fmt-check
	$(GO) test -race -tags '$(TAGS)' -timeout 25m ./...

run: deps examples build
	$(GO) build -o bin/demoapi ./scripts/demoapi
	BIN=$(BIN) scripts/run-examples.sh

vet:
	$(GO) vet -tags '$(TAGS)' ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin

# The benchmark (issue: docs/benchmarks.md): every contender, every shape, fsync on and off.
# BENCH_ARGS=--quick for a few minutes instead of ~15.
bench: deps examples build
	$(BIN) bench $(BENCH_ARGS)
