# Toolchains that build the example and test modules (docs/guests.md), installed by make so a
# fresh Debian 12 machine needs nothing else: Debian packages (Rust with the wasm32 std,
# clang + wasi-libc, LLVM 19 for TinyGo, binaryen, wabt), TinyGo built from the Go module
# proxy, and the AssemblyScript compiler pinned in an npm lock file. Every step checks first
# and is quick when everything is in place.

# Toolchains built here live outside the checkout, so clean clones and later runs reuse them.
TOOLS_DIR ?= $(HOME)/.cache/pgflow-wasm
TINYGO_VERSION ?= 0.40.1
# A wrapper that sets the environment TinyGo needs (scripts/install-tinygo.sh writes it).
TINYGO ?= $(TOOLS_DIR)/bin/tinygo
# Debian's Rust: the rustup one usually found first on PATH has no wasm32 standard library.
RUST_RUSTC ?= /usr/bin/rustc
RUST_CARGO ?= /usr/bin/cargo
WASM_CC ?= clang
AS_DIR := modules/examples/assemblyscript
# npm writes this file on every install: it stands for "node_modules matches the lock file".
AS_INSTALLED := $(AS_DIR)/node_modules/.package-lock.json
ASC := $(AS_DIR)/node_modules/.bin/asc

.PHONY: toolchains toolchain-apt toolchain-tinygo toolchain-assemblyscript
toolchains: toolchain-apt toolchain-tinygo toolchain-assemblyscript

toolchain-apt:
	@scripts/install-apt-packages.sh

toolchain-tinygo: toolchain-apt
	@TOOLS_DIR='$(TOOLS_DIR)' TINYGO_VERSION='$(TINYGO_VERSION)' scripts/install-tinygo.sh

toolchain-assemblyscript: $(AS_INSTALLED)

$(AS_INSTALLED): $(AS_DIR)/package.json $(AS_DIR)/package-lock.json | toolchain-apt
	@echo "toolchains: installing the AssemblyScript compiler pinned in $(AS_DIR)/package-lock.json"
	cd $(AS_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@
