# Test modules of the sandbox (sandbox/testdata), built from source into
# sandbox/testdata/build/ (git-ignored). `go test ./sandbox/...` fails, naming this target,
# when they are missing. Toolchains come from mk/toolchains.mk: Debian packages
# (toolchain-apt: wabt, clang, wasi-libc, rustc) and the pinned AssemblyScript compiler.

SANDBOX_TD    := sandbox/testdata
SANDBOX_BUILD := $(SANDBOX_TD)/build
WAT2WASM      ?= wat2wasm
WASM_CLANG    ?= clang
# Debian's rustc: the rustup one usually first on PATH has no wasm32 standard library.
WASM_RUSTC    ?= /usr/bin/rustc
SANDBOX_ASC   ?= $(CURDIR)/modules/examples/assemblyscript/node_modules/.bin/asc
GO            ?= go

SANDBOX_WAT_OUT  := $(patsubst $(SANDBOX_TD)/wat/%.wat,$(SANDBOX_BUILD)/%.wasm,$(wildcard $(SANDBOX_TD)/wat/*.wat))
SANDBOX_C_OUT    := $(patsubst $(SANDBOX_TD)/c/%.c,$(SANDBOX_BUILD)/c_%.wasm,$(wildcard $(SANDBOX_TD)/c/*.c))
SANDBOX_RUST_OUT := $(patsubst $(SANDBOX_TD)/rust/%.rs,$(SANDBOX_BUILD)/rust_%.wasm,$(wildcard $(SANDBOX_TD)/rust/*.rs))
SANDBOX_GO_OUT   := $(patsubst $(SANDBOX_TD)/go/%/main.go,$(SANDBOX_BUILD)/go_%.wasm,$(wildcard $(SANDBOX_TD)/go/*/main.go))
SANDBOX_AS_OUT   := $(patsubst $(SANDBOX_TD)/assemblyscript/%.ts,$(SANDBOX_BUILD)/as_%.wasm,$(wildcard $(SANDBOX_TD)/assemblyscript/*.ts))
SANDBOX_TESTDATA := $(SANDBOX_WAT_OUT) $(SANDBOX_C_OUT) $(SANDBOX_RUST_OUT) $(SANDBOX_GO_OUT) $(SANDBOX_AS_OUT)

.PHONY: sandbox-testdata clean-sandbox-testdata
sandbox-testdata: $(SANDBOX_TESTDATA)

$(SANDBOX_BUILD):
	mkdir -p $@

# WAT: threads are enabled only so the shared-memory test module assembles.
$(SANDBOX_BUILD)/%.wasm: $(SANDBOX_TD)/wat/%.wat | toolchain-apt $(SANDBOX_BUILD)
	$(WAT2WASM) --enable-threads $< -o $@

# C: reactors, except command.c which is a plain WASI command (main -> _start).
$(SANDBOX_BUILD)/c_%.wasm: $(SANDBOX_TD)/c/%.c | toolchain-apt $(SANDBOX_BUILD)
	$(WASM_CLANG) --target=wasm32-wasi -O2 $(if $(filter command,$*),,-mexec-model=reactor) -Wl,--strip-all -o $@ $<

$(SANDBOX_BUILD)/rust_%.wasm: $(SANDBOX_TD)/rust/%.rs | toolchain-apt $(SANDBOX_BUILD)
	$(WASM_RUSTC) --target wasm32-wasi --crate-type cdylib -C opt-level=s -C panic=abort -C strip=symbols -o $@ $<

$(SANDBOX_BUILD)/go_%.wasm: $(SANDBOX_TD)/go/%/main.go | $(SANDBOX_BUILD)
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $@ ./$(SANDBOX_TD)/go/$*

# AssemblyScript: --use abort=... replaces env.abort with the module's own abort.
$(SANDBOX_BUILD)/as_%.wasm: $(SANDBOX_TD)/assemblyscript/%.ts | toolchain-assemblyscript $(SANDBOX_BUILD)
	cd $(SANDBOX_TD)/assemblyscript && $(SANDBOX_ASC) $*.ts -O3 --runtime incremental \
		--use abort=$*/abort -o $(CURDIR)/$@

clean-sandbox-testdata:
	rm -rf $(SANDBOX_BUILD)

clean: clean-sandbox-testdata
