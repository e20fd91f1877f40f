# Release binaries and the container image (docs/deploy.md).
#
#   make dist    dist/pgflow-wasm-<version>-linux-{amd64,arm64} (wazero and wasmtime, cgo)
#                and dist/pgflow-wasm-<version>-linux-amd64-static (wazero only, statically linked),
#                with dist/SHA256SUMS
#   make image   an OCI image of the static binary (dist/image, dist/pgflow-wasm-image.tar)
#
# The version and commit are stamped into internal/buildinfo; --version, `db status` and
# /metrics (pgflow_wasm_build_info) show them.

# Computed once per make (not at each use), so every file of one dist has one version.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
endif
ifeq ($(origin COMMIT),undefined)
COMMIT := $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c+dirty; })
endif
BUILDINFO := github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)
# Release builds: no local paths in the binary, no symbol tables (about a third smaller).
DIST_FLAGS := -trimpath -ldflags '$(LDFLAGS) -s -w'
DIST := dist
DIST_BASE := $(DIST)/pgflow-wasm-$(VERSION)-linux
ARM64_CC ?= aarch64-linux-gnu-gcc

.PHONY: dist dist-static dist-cross image
dist: $(PGFLOW_SQL) dist-cross
	@mkdir -p $(DIST)
	rm -f $(DIST)/pgflow-wasm-*-linux-* $(DIST)/SHA256SUMS
	CGO_ENABLED=1 GOOS=linux GOARCH=amd64 $(GO) build $(DIST_FLAGS) -tags wasmtime -o $(DIST_BASE)-amd64 ./cmd/pgflow-wasm
	@# wasmtime-go ships a static libwasmtime for linux-aarch64: Debian's cross gcc links it.
	CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC=$(ARM64_CC) $(GO) build $(DIST_FLAGS) -tags wasmtime -o $(DIST_BASE)-arm64 ./cmd/pgflow-wasm
	$(MAKE) --no-print-directory dist-static VERSION=$(VERSION) COMMIT=$(COMMIT)
	cd $(DIST) && sha256sum pgflow-wasm-$(VERSION)-linux-* > SHA256SUMS
	@# The sizes docs/deploy.md quotes.
	@cd $(DIST) && for f in pgflow-wasm-$(VERSION)-linux-*; do \
		n=$$(stat -c %s $$f); printf 'dist: %-50s %10s bytes (%s)\n' $$f $$n "$$(numfmt --to=iec-i --suffix=B --format=%.1f $$n)"; done

# wazero only, linked statically: runs on any Linux (no glibc needed), what the image ships.
# cgo still, for PostgreSQL's own parser in the SQL statement filter (sandbox/sqlcap): a
# build without cgo would fall back to the weaker text filter.
STATIC_FLAGS := -trimpath -tags netgo,osusergo -ldflags '$(LDFLAGS) -s -w -linkmode external -extldflags -static'
dist-static: $(PGFLOW_SQL)
	@mkdir -p $(DIST)
	CGO_ENABLED=1 GOOS=linux GOARCH=amd64 $(GO) build $(STATIC_FLAGS) -o $(DIST_BASE)-amd64-static ./cmd/pgflow-wasm

# The cross compiler comes from Debian (only make dist needs it).
dist-cross:
	@command -v $(ARM64_CC) >/dev/null || { echo "dist: installing gcc-aarch64-linux-gnu (cgo for linux/arm64)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc-aarch64-linux-gnu libc6-dev-arm64-cross || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc-aarch64-linux-gnu libc6-dev-arm64-cross; }; }

IMAGE_DIR := $(DIST)/image
IMAGE_TAR := $(DIST)/pgflow-wasm-image.tar
# The name the Helm chart pulls by default: image.repository of its values.yaml, tagged with
# its Chart.yaml appVersion (the binary inside still says its own VERSION and COMMIT).
CHART_DIR := deploy/helm/pgflow-wasm
IMAGE_NAME ?= $(shell sed -n 's/^  repository: *\([^ #]*\).*/\1/p' $(CHART_DIR)/values.yaml | head -1)
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}.*/\1/p' $(CHART_DIR)/Chart.yaml)
# The chart's test compares it with the image the chart renders.
.PHONY: image-name
image-name:
	@echo $(IMAGE_NAME):$(IMAGE_TAG)
image: dist-static
	scripts/build-image.sh $(DIST_BASE)-amd64-static $(VERSION) $(COMMIT) $(IMAGE_DIR) $(IMAGE_TAR) $(IMAGE_NAME):$(IMAGE_TAG)

clean: dist-clean
.PHONY: dist-clean
dist-clean:
	rm -rf $(DIST)
