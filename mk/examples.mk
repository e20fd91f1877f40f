# Example handlers (modules/examples/<lang>/<example>.wasm, every example in every language)
# and the handlers the worker's tests use (modules/testdata/<name>.wasm), built from source.
# Each module is rebuilt only when its sources change. See docs/guests.md.

EXAMPLES := greet word_count sum
EXAMPLE_LANGS := rust tinygo assemblyscript go c
# Examples that act on the world (outbound HTTP, named values, SQL; docs/guests.md): fetch in
# four languages, charge (the docs' complete example) in TinyGo, ledger in Rust and TinyGo.
FETCH_LANGS := rust tinygo assemblyscript go
LEDGER_LANGS := rust tinygo
TESTMODULES := echo flaky fail spin work echo_map oracle http_call sql_call

EXAMPLE_WASM := $(foreach lang,$(EXAMPLE_LANGS),$(EXAMPLES:%=modules/examples/$(lang)/%.wasm)) \
	$(FETCH_LANGS:%=modules/examples/%/fetch.wasm) modules/examples/tinygo/charge.wasm \
	$(LEDGER_LANGS:%=modules/examples/%/ledger.wasm)
TESTMODULE_WASM := $(TESTMODULES:%=modules/testdata/%.wasm)
# The TypeScript examples are bundled by the worker itself; their flow file imports the
# @pgflow/dsl pinned in their package-lock.json.
TS_EXAMPLES_DIR := modules/examples/typescript

.PHONY: examples testmodules examples-test examples-clean
examples: toolchains $(EXAMPLE_WASM) testmodules $(TS_EXAMPLES_DIR)/node_modules
testmodules: $(TESTMODULE_WASM)

# --- C (clang + wasi-libc, reactor) -----------------------------------------------------
WASM_CFLAGS := --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Werror -Wl,--strip-all -I abi/c
C_GUEST := abi/c/pgflow.h abi/c/pgflow_json.h

modules/examples/c/%.wasm: modules/examples/c/%.c $(C_GUEST) | toolchain-apt
	$(WASM_CC) $(WASM_CFLAGS) -o $@ $<

modules/testdata/%.wasm: modules/testdata/%.c $(C_GUEST) | toolchain-apt
	$(WASM_CC) $(WASM_CFLAGS) -o $@ $<

# --- Rust (one cargo workspace: serde_json compiles once for every example) ---------------
RUST_DIR := modules/examples/rust
RUST_TARGET := wasm32-unknown-unknown
RUST_SRC := $(shell find $(RUST_DIR) abi/rust -name target -prune -o \( -name '*.rs' -o -name Cargo.toml -o -name config.toml \) -print)
RUST_EXAMPLES := $(EXAMPLES) fetch ledger
RUST_WASM := $(RUST_EXAMPLES:%=$(RUST_DIR)/%.wasm)

$(RUST_WASM) &: $(RUST_SRC) | toolchain-apt
	cd $(RUST_DIR) && RUSTC=$(RUST_RUSTC) $(RUST_CARGO) build --quiet --release --target $(RUST_TARGET)
	for ex in $(RUST_EXAMPLES); do cp $(RUST_DIR)/target/$(RUST_TARGET)/release/$$ex.wasm $(RUST_DIR)/$$ex.wasm; done

# --- Go and TinyGo (one source tree, modules/examples/go, its own go.mod) ----------------
GO_EX_DIR := modules/examples/go
GO_EX_SRC := $(shell find $(GO_EX_DIR) abi/go -name '*.go' -o -name go.mod)
# -gc=leaking: every task gets a fresh instance, which dies with its garbage, so a collector
# only costs time: with TinyGo's default (conservative) one, reading a 40 KB context into a
# fresh instance took 0.8 ms instead of 0.05 ms (docs/guests.md). Such modules must not be
# used with reuse_instance: their memory only grows.
TINYGO_FLAGS := -target=wasip1 -buildmode=c-shared -scheduler=none -no-debug -gc=leaking

$(GO_EX_DIR)/%.wasm: $(GO_EX_SRC)
	cd $(GO_EX_DIR) && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $*.wasm ./$*

# TinyGo warns that LLVM 19 does not know two wasm features it names: harmless, filtered.
modules/examples/tinygo/%.wasm: $(GO_EX_SRC) | toolchain-tinygo
	set -o pipefail; cd $(GO_EX_DIR) && $(TINYGO) build $(TINYGO_FLAGS) -o ../tinygo/$*.wasm ./$* 2>&1 \
		| { grep -v 'is not a recognized feature for this target' || true; }

# --- AssemblyScript (the compiler pinned by package-lock.json, see mk/toolchains.mk) -------
# (mk/toolchains.mk is read after this file: targets and prerequisites here cannot use its variables.)
AS_EX_DIR := modules/examples/assemblyscript
AS_GUEST := $(wildcard abi/assemblyscript/*.ts)
ASC_FLAGS := -O3 --noAssert --runtime incremental --exportStart _initialize --use abort=../../../abi/assemblyscript/pgflow/pgflowAbort

$(AS_EX_DIR)/%.wasm: $(AS_EX_DIR)/%.ts $(AS_GUEST) $(AS_EX_DIR)/package-lock.json | toolchain-assemblyscript
	cd $(AS_EX_DIR) && node_modules/.bin/asc $*.ts $(ASC_FLAGS) -o $*.wasm

# --- Unit tests of the guest libraries and example helpers that run natively --------------
# (The modules themselves are tested by the sandbox's conformance test, on both engines; the
# test hosts of the libraries also by the projects scaffold/project_test.go builds.)
AS_NUMBER_TEST := abi/assemblyscript/test/number_test
AS_SQL_TEST := abi/assemblyscript/test/sql_test

examples-test: toolchain-apt toolchain-assemblyscript
	cd abi/go && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./... && $(GO) test ./...
	cd $(GO_EX_DIR) && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./... && $(GO) test ./...
	cd abi/rust && RUSTC=$(RUST_RUSTC) $(RUST_CARGO) test --quiet --lib
	@mkdir -p bin
	$(WASM_CC) -Wall -Wextra -Werror -I abi/c -o bin/c-testhost-test abi/c/test/testhost_test.c && bin/c-testhost-test
	cd $(RUST_DIR) && RUSTC=$(RUST_RUSTC) $(RUST_CARGO) test --quiet --lib -p jsonfmt
	cd $(AS_EX_DIR) && node_modules/.bin/asc ../../../$(AS_NUMBER_TEST).ts -O3 --runtime incremental -o ../../../$(AS_NUMBER_TEST).wasm
	node $(AS_NUMBER_TEST).mjs $(AS_NUMBER_TEST).wasm
	cd $(AS_EX_DIR) && node_modules/.bin/asc ../../../$(AS_SQL_TEST).ts $(ASC_FLAGS) -o ../../../$(AS_SQL_TEST).wasm
	node $(AS_SQL_TEST).mjs $(AS_SQL_TEST).wasm

test: examples-test

examples-clean:
	rm -f $(EXAMPLE_WASM) $(TESTMODULE_WASM) $(AS_NUMBER_TEST).wasm $(AS_SQL_TEST).wasm
	rm -rf $(RUST_DIR)/target abi/rust/target

clean: examples-clean

$(TS_EXAMPLES_DIR)/node_modules: $(TS_EXAMPLES_DIR)/package-lock.json $(TS_EXAMPLES_DIR)/package.json
	cd $(TS_EXAMPLES_DIR) && $(NPM) ci --no-audit --no-fund
	@touch $@
