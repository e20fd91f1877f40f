package sandbox

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The errno values the host returns are WASI's, as wasi-libc's header numbers them (guests
// print them: docs/sandbox.md explains the ones a handler meets).
func TestErrnoValuesAreWASIs(t *testing.T) {
	const header = "/usr/include/wasm32-wasi/wasi/api.h" // Debian's wasi-libc (make toolchains)
	text, err := os.ReadFile(header)
	if err != nil {
		t.Fatalf("%v: install wasi-libc (make toolchains)", err)
	}
	want := map[string]int{}
	for _, m := range regexp.MustCompile(`#define __WASI_ERRNO_([A-Z0-9]+) \(UINT16_C\((\d+)\)\)`).FindAllStringSubmatch(string(text), -1) {
		want[m[1]], _ = strconv.Atoi(m[2])
	}
	for name, got := range map[string]int{
		"SUCCESS": errnoSuccess, "BADF": errnoBadf, "FAULT": errnoFault, "INVAL": errnoInval, "NOSYS": errnoNosys,
		"NOTSOCK": errnoNotsock, "NOTSUP": errnoNotsup, "SPIPE": errnoSpipe, "NOTDIR": errnoNotdir,
	} {
		if w, ok := want[name]; !ok || w != got {
			t.Errorf("errno %s is %d here, %d in %s", name, got, w, header)
		}
	}
}
