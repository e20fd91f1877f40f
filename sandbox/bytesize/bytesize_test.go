package bytesize

import "testing"

func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uint64{"65536": 65536, "512KiB": 512 << 10, "32MiB": 32 << 20, "1GiB": 1 << 30, "2 MiB": 2 << 20} {
		if got, ok := Parse(in); !ok || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "32mb", "-1", "1.5MiB", "MiB", "2048GiB"} {
		if _, ok := Parse(in); ok {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

func TestFlagReadsBack(t *testing.T) {
	t.Parallel()
	for _, n := range []uint64{1 << 30, 64 << 20, 512 << 10, 3 << 20} {
		if got, ok := Parse(Flag(n)); !ok || got != n {
			t.Errorf("Parse(Flag(%d)) = %d, %v", n, got, ok)
		}
	}
	if got := Flag(1000); got != "1000 bytes" {
		t.Errorf("Flag(1000) = %q", got)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for n, want := range map[uint64]string{12: "12 bytes", 1536: "1.5 KiB", 8 << 20: "8 MiB", 3 << 19: "1.50 MiB", 64 << 10: "64 KiB"} {
		if got := Text(n); got != want {
			t.Errorf("Text(%d) = %q, want %q", n, got, want)
		}
	}
}
