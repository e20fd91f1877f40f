#!/usr/bin/env bash
# Installs the Debian packages the WebAssembly toolchains need, only those missing.
# Fast when everything is present (one dpkg-query call); runs 'apt-get update' only when
# something must be installed. Prints each missing package and the toolchain that needs it.
#
#   install-apt-packages.sh                  every toolchain (this repository's make)
#   install-apt-packages.sh rust [c ...]     only those toolchains: rust, c, tinygo,
#                                            assemblyscript (a project of pgflow-wasm new)
set -euo pipefail

# package:toolchains:why
wanted=(
	"rustc:rust:Rust guests (Debian rustc has the wasm32 std; rustup's usually does not)"
	"cargo:rust:Rust guests"
	"libstd-rust-dev-wasm32:rust:Rust guests (standard library for wasm32 targets)"
	"librust-serde-json-dev:rust:Rust guests (serde_json from /usr/share/cargo/registry, offline)"
	"clang:c:C guests"
	"lld:c:C guests (wasm-ld)"
	"wasi-libc:c tinygo:C guests and TinyGo (libc for wasm32-wasi)"
	"libclang-rt-dev-wasm32:c:C guests (compiler-rt builtins for wasm32)"
	"llvm-19-dev:tinygo:TinyGo (built against LLVM 19)"
	"libclang-19-dev:tinygo:TinyGo"
	"lld-19:tinygo:TinyGo (wasm-ld)"
	"clang-19:tinygo:TinyGo"
	"libclang-rt-19-dev-wasm32:tinygo:TinyGo (compiler-rt builtins seeded into its cache)"
	"binaryen:tinygo:TinyGo (wasm-opt)"
	"wabt:tools:inspecting modules (wasm-objdump, wat2wasm)"
)
# Wanted too for this repository's tests, but the build does not stop without them: the tests
# that need them skip, saying why. (Not for a project of `pgflow-wasm new`.)
optional=(
	"chromium:the dashboard's browser tests (headless, driven by chromedp)"
	"postgresql-15-cron:the test that installs pgflow 0.14 on a server with a real pg_cron"
	"umoci:make image (assembles the OCI image)"
	"podman:the test that runs the image (make test-image)"
	"runc:the image test, where crun cannot start containers"
)
# npm is only needed when the machine has no Node.js at all (AssemblyScript compiler).
command -v npm >/dev/null 2>&1 || wanted+=("npm:assemblyscript:AssemblyScript (compiler from npm)")

if [ $# -gt 0 ]; then
	for t in "$@"; do
		case $t in
		rust | c | tinygo | assemblyscript | tools) ;;
		*) echo "install-apt-packages: unknown toolchain '$t': use rust, c, tinygo, assemblyscript or tools" >&2; exit 2 ;;
		esac
	done
	chosen=()
	for w in "${wanted[@]}"; do
		rest=${w#*:}
		for t in "$@"; do
			if [[ " ${rest%%:*} " == *" $t "* ]]; then chosen+=("$w"); break; fi
		done
	done
	wanted=("${chosen[@]}")
	optional=()
	[ ${#wanted[@]} -eq 0 ] && exit 0
fi

names=()
for w in "${wanted[@]}" "${optional[@]}"; do names+=("${w%%:*}"); done

installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${names[@]}" 2>/dev/null | awk '$NF == "installed" { print $1 }' || true)

# missing_of WHY_FIELDS LIST...: the packages of LIST that are not installed, announcing each
# (WHY_FIELDS: how many fields after the name come before the reason).
missing_of() {
	local skip=$1
	shift
	for w in "$@"; do
		name=${w%%:*}
		why=${w#*:}
		[ "$skip" -eq 1 ] && why=${why#*:}
		if ! grep -qx "$name" <<<"$installed"; then
			echo "toolchains: installing $name, needed by $why" >&2
			echo "$name"
		fi
	done
}
mapfile -t missing < <(missing_of 1 "${wanted[@]}")
mapfile -t missing_optional < <(missing_of 0 "${optional[@]}")
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
