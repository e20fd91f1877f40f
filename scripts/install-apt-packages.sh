#!/usr/bin/env bash
# Installs the Debian packages the WebAssembly toolchains and the tests need, only those missing.
# Fast when everything is present (one dpkg-query call); runs 'apt-get update' only when
# something must be installed. Prints each missing package and the toolchain that needs it.
set -euo pipefail

# package: why (the toolchain that needs it)
wanted=(
	"rustc:Rust guests (Debian rustc has the wasm32 std; rustup's usually does not)"
	"cargo:Rust guests"
	"libstd-rust-dev-wasm32:Rust guests (standard library for wasm32 targets)"
	"librust-serde-json-dev:Rust examples (serde_json from /usr/share/cargo/registry, offline)"
	"clang:C guests"
	"lld:C guests (wasm-ld)"
	"wasi-libc:C guests and TinyGo (libc for wasm32-wasi)"
	"libclang-rt-dev-wasm32:C guests (compiler-rt builtins for wasm32)"
	"llvm-19-dev:TinyGo (built against LLVM 19)"
	"libclang-19-dev:TinyGo"
	"lld-19:TinyGo (wasm-ld)"
	"clang-19:TinyGo"
	"libclang-rt-19-dev-wasm32:TinyGo (compiler-rt builtins seeded into its cache)"
	"binaryen:TinyGo (wasm-opt)"
	"wabt:inspecting modules (wasm-objdump, wat2wasm)"
)
# Wanted too, but the build does not stop without them: the tests that need them skip, saying why.
optional=(
	"chromium:the dashboard's browser tests (headless, driven by chromedp)"
	"postgresql-15-cron:the test that installs pgflow 0.14 on a server with a real pg_cron"
)
# npm is only needed when the machine has no Node.js at all (AssemblyScript compiler).
command -v npm >/dev/null 2>&1 || wanted+=("npm:AssemblyScript (compiler from npm)")

names=()
for w in "${wanted[@]}" "${optional[@]}"; do names+=("${w%%:*}"); done

installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${names[@]}" 2>/dev/null | awk '$NF == "installed" { print $1 }' || true)

# missing_of LIST...: the packages of LIST that are not installed, announcing each.
missing_of() {
	for w in "$@"; do
		name=${w%%:*}
		if ! grep -qx "$name" <<<"$installed"; then
			echo "toolchains: installing $name, needed by ${w#*:}" >&2
			echo "$name"
		fi
	done
}
mapfile -t missing < <(missing_of "${wanted[@]}")
mapfile -t missing_optional < <(missing_of "${optional[@]}")
[ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "toolchains: missing Debian packages: ${missing[*]} ${missing_optional[*]}; run as root or: sudo apt-get install -y ${missing[*]} ${missing_optional[*]}" >&2
	[ ${#missing[@]} -eq 0 ] && exit 0
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
if [ ${#missing[@]} -gt 0 ]; then
	apt-get install -y -q "${missing[@]}"
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
	apt-get install -y -q "${missing_optional[@]}" ||
		echo "toolchains: could not install ${missing_optional[*]}: the tests that need them will be skipped" >&2
fi
