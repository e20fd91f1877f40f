// Package scripts carries this folder's toolchain installers in the pgflow-wasm binary, so
// that a project made by `pgflow-wasm new` installs its toolchain with the same recipes as
// this repository's make (docs/guests.md).
package scripts

import _ "embed"

// InstallAptPackages is install-apt-packages.sh: the Debian packages of the toolchains.
//
//go:embed install-apt-packages.sh
var InstallAptPackages []byte

// InstallTinyGo is install-tinygo.sh: TinyGo built from the Go module proxy.
//
//go:embed install-tinygo.sh
var InstallTinyGo []byte
