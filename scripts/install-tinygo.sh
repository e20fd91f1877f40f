#!/usr/bin/env bash
# Builds TinyGo from the Go module proxy against Debian's LLVM 19 and installs a wrapper
# at $TOOLS_DIR/bin/tinygo. TinyGo is in neither apt nor npm, so this is the only way to get
# it on these machines (recipe: /work/shared/docs/toolchains.md). Idempotent: does nothing
# when the wrapper, the binary and the seeded libraries are already in place.
#
#   TOOLS_DIR       where toolchains built by make live (default ~/.cache/pgflow-wasm)
#   TINYGO_VERSION  default 0.40.1
#   TINYGO_GO       the Go toolchain TinyGo is built with and runs (default go1.25.5;
#                   TinyGo 0.40.1 refuses Go 1.26, and GOTOOLCHAIN fetches this one from the proxy)
set -euo pipefail

version=${TINYGO_VERSION:-0.40.1}
tools=${TOOLS_DIR:-$HOME/.cache/pgflow-wasm}
gotool=${TINYGO_GO:-go1.25.5}
llvm=/usr/lib/llvm-19
root=$tools/tinygo-$version
wrapper=$tools/bin/tinygo
cache=$root/cache/tinygo # TinyGo's own cache (os.UserCacheDir()/tinygo): kept beside the binary
libc_dir=$cache/wasi-libc-wasm32-unknown-wasi-generic
rt_dir=$cache/compiler-rt-wasm32-unknown-wasi-generic

# Debian ships wasi-libc and compiler-rt prebuilt; TinyGo would otherwise build them from git
# submodules that the module zip does not contain.
debian_libc=/usr/lib/wasm32-wasi/libc.a
debian_libc_include=/usr/include/wasm32-wasi
debian_rt=$llvm/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a

for f in "$llvm/bin/clang" "$debian_libc" "$debian_rt"; do
	if [ ! -e "$f" ]; then
		echo "install-tinygo: $f is missing; run 'make toolchains' (scripts/install-apt-packages.sh) first" >&2
		exit 1
	fi
done

seed_cache() {
	mkdir -p "$libc_dir" "$rt_dir"
	rm -rf "$libc_dir/include"
	cp -r "$debian_libc_include" "$libc_dir/include"
	cp "$debian_libc" "$libc_dir/lib.a"
	cp "$debian_rt" "$rt_dir/lib.a"
}

write_wrapper() {
	mkdir -p "$(dirname "$wrapper")"
	cat >"$wrapper.tmp" <<WRAP
#!/usr/bin/env bash
# TinyGo $version built by pgflow-wasm's scripts/install-tinygo.sh. Sets the environment
# TinyGo needs on Debian: LLVM 19 tools first on PATH, the Go toolchain it supports, and its
# own cache (seeded with Debian's wasi-libc and compiler-rt) beside the binary.
export GOCACHE="\${GOCACHE:-\$(go env GOCACHE)}"
export GOTOOLCHAIN=$gotool
export PATH="$llvm/bin:\$PATH"
export XDG_CACHE_HOME="$root/cache"
exec "$root/build/tinygo" "\$@"
WRAP
	chmod +x "$wrapper.tmp"
	mv "$wrapper.tmp" "$wrapper"
}

# One install at a time (parallel makes, several checkouts sharing TOOLS_DIR).
mkdir -p "$tools"
exec 9>"$tools/.install-tinygo.lock"
flock 9

if [ -x "$root/build/tinygo" ]; then
	[ -f "$libc_dir/lib.a" ] && [ -f "$rt_dir/lib.a" ] || seed_cache
	[ -x "$wrapper" ] || write_wrapper
	exit 0
fi

echo "install-tinygo: building TinyGo $version into $root (not packaged for Debian; about a minute, once: later runs reuse it)"
start=$(date +%s)
export GOTOOLCHAIN=$gotool
cd "$tools" # outside any module: the checkout's go.mod asks for a newer Go than TinyGo accepts
# 'go install ...@version' needs the proxy's version list, which this proxy refuses: download the exact module.
dir=$(go mod download -json "github.com/tinygo-org/tinygo@v$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
	echo "install-tinygo: go mod download of github.com/tinygo-org/tinygo@v$version failed" >&2
	exit 1
fi

work=$(mktemp -d "$tools/tinygo-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$dir/." "$work/"
chmod -R u+w "$work"
# The module zip has no git submodules; 'net' lives in one. Handlers do not need it.
mkdir -p "$work/src/net"
(cd "$work" && PATH="$llvm/bin:$PATH" go build -tags llvm19 -o build/tinygo .)

chmod 755 "$work"
rm -rf "$root"
mv "$work" "$root"
trap - EXIT
seed_cache
write_wrapper
"$wrapper" version
echo "install-tinygo: TinyGo $version built in $(($(date +%s) - start)) s"
