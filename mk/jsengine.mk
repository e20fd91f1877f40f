# The JavaScript engine of TypeScript and JavaScript handlers (sandbox/jshandler, see
# docs/RATIONALE.md): QuickJS-NG built from its C sources with Debian's clang + wasi-libc and
# linked with our ABI glue (sandbox/jshandler/engine/c) into one reactor module, which the
# Go build embeds (sandbox/jshandler/engine). The sources come from the Go module proxy as
# the module it synthesizes from the pinned tag; go checks them against the Go checksum
# database and we check the hash pinned here, so a moved tag cannot change what we build.
# They stay in the module cache: nothing of them is copied into this repository. Generated,
# never committed: `build`, `modules` and `test` need it.

QUICKJS_MODULE  := github.com/quickjs-ng/quickjs
QUICKJS_VERSION := v0.10.1
QUICKJS_SUM     := h1:mDd2mBT6Tu9wulMET7s+Pl4FeRfNAV8HUoLKmBbu/t4=
QUICKJS_OBJS    := cutils libregexp libunicode quickjs xsum

JS_ENGINE_DIR   := sandbox/jshandler/engine
JS_ENGINE_BUILD := $(JS_ENGINE_DIR)/build
JS_ENGINE       := $(JS_ENGINE_DIR)/wasm/engine.wasm
JS_ENGINE_INFO  := $(JS_ENGINE_DIR)/wasm/VERSION
# A file naming the folder of the sources in the module cache (written once they check out).
QUICKJS_DIR_FILE := $(JS_ENGINE_BUILD)/quickjs-$(QUICKJS_VERSION).dir
QUICKJS_CFLAGS  := --target=wasm32-wasi -O2 -D_GNU_SOURCE
# The C stack comes first in memory, so an overflow runs below address 0 and traps instead of
# writing over the engine's data; 1 MiB holds 3,271 nested JavaScript calls (docs/guests.md).
JS_ENGINE_LDFLAGS := -mexec-model=reactor -Wl,--stack-first -Wl,-z,stack-size=1048576 -Wl,--strip-all

# The prelude (sandbox/jshandler/prelude): prelude.js and its modules with the npm packages
# its package-lock.json pins (whatwg-url, web-streams-polyfill...), bundled by build.go with
# esbuild into one script the Go build embeds beside the engine. Generated, never committed.
JS_PRELUDE_DIR  := sandbox/jshandler/prelude
JS_PRELUDE      := $(JS_ENGINE_DIR)/wasm/prelude.js
# Both are bundled the one way of scriptbuild (the shared esbuild settings).
JS_SCRIPTBUILD  := sandbox/jshandler/internal/scriptbuild/scriptbuild.go
JS_PRELUDE_SRC  := $(wildcard $(JS_PRELUDE_DIR)/*.js) $(JS_PRELUDE_DIR)/build.go $(JS_SCRIPTBUILD)
# The @supabase/supabase-js behind ctx.supabase (sandbox/jshandler/supabasejs), pinned by its own
# package-lock.json and bundled apart from the prelude: only steps granted Supabase carry it.
JS_SUPABASE_DIR := sandbox/jshandler/supabasejs
JS_SUPABASE     := $(JS_ENGINE_DIR)/wasm/supabase.js

.PHONY: jsengine clean-jsengine
jsengine: $(JS_ENGINE) $(JS_ENGINE_INFO) $(JS_PRELUDE) $(JS_SUPABASE)
build: $(JS_ENGINE) $(JS_ENGINE_INFO) $(JS_PRELUDE) $(JS_SUPABASE)
# Release binaries embed them too (a binary without them refuses TypeScript handlers).
dist dist-static: $(JS_ENGINE) $(JS_ENGINE_INFO) $(JS_PRELUDE) $(JS_SUPABASE)

# npm ci is re-run only when the lock file is newer than the installed tree.
$(JS_PRELUDE_DIR)/node_modules: $(JS_PRELUDE_DIR)/package-lock.json $(JS_PRELUDE_DIR)/package.json
	cd $(JS_PRELUDE_DIR) && $(NPM) ci --no-audit --no-fund
	@touch $@

$(JS_PRELUDE): $(JS_PRELUDE_SRC) $(JS_PRELUDE_DIR)/node_modules
	$(GO) run ./$(JS_PRELUDE_DIR)/build.go $@

$(JS_SUPABASE_DIR)/node_modules: $(JS_SUPABASE_DIR)/package-lock.json $(JS_SUPABASE_DIR)/package.json
	cd $(JS_SUPABASE_DIR) && $(NPM) ci --no-audit --no-fund
	@touch $@

$(JS_SUPABASE): $(JS_SUPABASE_DIR)/entry.js $(JS_SUPABASE_DIR)/build.go $(JS_SCRIPTBUILD) $(JS_SUPABASE_DIR)/node_modules
	$(GO) run ./$(JS_SUPABASE_DIR)/build.go $@

# Real npm SDKs the tests bundle into handlers unchanged (sandbox/jshandler/sdk_test.go),
# pinned by their own package-lock.json: test-only, never in the binary.
JS_SDK_DIR := sandbox/jshandler/testdata/sdk
.PHONY: jshandler-sdks
jshandler-sdks: $(JS_SDK_DIR)/node_modules
$(JS_SDK_DIR)/node_modules: $(JS_SDK_DIR)/package-lock.json $(JS_SDK_DIR)/package.json
	cd $(JS_SDK_DIR) && $(NPM) ci --no-audit --no-fund
	@touch $@
test: jshandler-sdks
modules: jsengine

$(JS_ENGINE_BUILD):
	mkdir -p $@

# go mod download outside this module (from /), so the repository's go.mod and go.sum stay
# as they are; -mod=mod lets it run whatever GOFLAGS the caller has.
$(QUICKJS_DIR_FILE): mk/jsengine.mk | $(JS_ENGINE_BUILD)
	@echo "jsengine: fetching the QuickJS-NG $(QUICKJS_VERSION) sources from the Go module proxy"
	@out=$$(cd / && GOFLAGS=-mod=mod $(GO) mod download -json $(QUICKJS_MODULE)@$(QUICKJS_VERSION)) || { echo "$$out"; exit 1; }; \
	sum=$$(printf '%s\n' "$$out" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$$/\1/p'); \
	dir=$$(printf '%s\n' "$$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	if [ "$$sum" != "$(QUICKJS_SUM)" ]; then \
		echo "jsengine: $(QUICKJS_MODULE)@$(QUICKJS_VERSION) has hash '$$sum', pinned $(QUICKJS_SUM): refusing to build it"; exit 1; fi; \
	if [ ! -f "$$dir/quickjs.c" ]; then echo "jsengine: no quickjs.c in '$$dir'"; exit 1; fi; \
	echo "$$dir" > $@

# Only clang, lld and wasi-libc: `make build` needs no other toolchain.
.PHONY: toolchain-c
toolchain-c:
	@scripts/install-apt-packages.sh c

$(JS_ENGINE_BUILD)/%.o: $(QUICKJS_DIR_FILE) | toolchain-c
	$(WASM_CC) $(QUICKJS_CFLAGS) -c "$$(cat $(QUICKJS_DIR_FILE))/$*.c" -o $@

# quickjs.c with the source positions of engine/positions.sed (docs/RATIONALE.md); the sources
# in the module cache stay as they are. The count check fails the build when a line of the
# script no longer matches (a new QuickJS-NG version).
QUICKJS_POSITIONS := $(JS_ENGINE_DIR)/positions.sed
$(JS_ENGINE_BUILD)/quickjs-positions.c: $(QUICKJS_DIR_FILE) $(QUICKJS_POSITIONS)
	src="$$(cat $(QUICKJS_DIR_FILE))/quickjs.c"; sed -f $(QUICKJS_POSITIONS) "$$src" > $@.tmp; \
	added=$$(( $$(grep -c 'emit_source_loc(s);' $@.tmp) - $$(grep -c 'emit_source_loc(s);' "$$src") )); \
	if [ "$$added" != 4 ]; then echo "jsengine: $(QUICKJS_POSITIONS) added $$added source positions to quickjs.c, want 4: update it for this QuickJS-NG version"; rm -f $@.tmp; exit 1; fi; \
	mv $@.tmp $@

$(JS_ENGINE_BUILD)/quickjs.o: $(JS_ENGINE_BUILD)/quickjs-positions.c | toolchain-c
	$(WASM_CC) $(QUICKJS_CFLAGS) -I "$$(cat $(QUICKJS_DIR_FILE))" -c $< -o $@

$(JS_ENGINE): $(JS_ENGINE_DIR)/c/pgflow_js.c abi/c/pgflow.h $(QUICKJS_OBJS:%=$(JS_ENGINE_BUILD)/%.o) | toolchain-c
	$(WASM_CC) --target=wasm32-wasi -O2 -Wall -Wextra -Werror -I abi/c -I "$$(cat $(QUICKJS_DIR_FILE))" \
		$(JS_ENGINE_LDFLAGS) -o $@ $< $(QUICKJS_OBJS:%=$(JS_ENGINE_BUILD)/%.o) -lm

$(JS_ENGINE_INFO): $(JS_ENGINE) $(QUICKJS_POSITIONS)
	echo "QuickJS-NG $(QUICKJS_VERSION) ($(QUICKJS_SUM)) with $(QUICKJS_POSITIONS), clang $$($(WASM_CC) -dumpversion)" > $@

clean-jsengine:
	rm -rf $(JS_ENGINE_BUILD) $(JS_ENGINE) $(JS_ENGINE_INFO) $(JS_PRELUDE) $(JS_SUPABASE)

clean: clean-jsengine

# A pgflow project of @pgflow/dsl flow files (testdata/dslflows): its pinned @pgflow/dsl is
# what the flow files import, and what the compile-equality test runs compileFlow from.
DSL_TESTDATA_DIR := testdata/dslflows
.PHONY: dsl-testdata
dsl-testdata: $(DSL_TESTDATA_DIR)/node_modules
$(DSL_TESTDATA_DIR)/node_modules: $(DSL_TESTDATA_DIR)/package-lock.json $(DSL_TESTDATA_DIR)/package.json
	cd $(DSL_TESTDATA_DIR) && $(NPM) ci --no-audit --no-fund
	@touch $@
test: dsl-testdata
