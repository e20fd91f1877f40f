package poller

import (
	"bytes"
	"fmt"
	"testing"
)

// The cache is bounded in bytes: the least recently used inputs go first, an input over
// the whole budget is never kept, and replacing an input accounts its new size.
func TestRunInputCacheIsBoundedInBytes(t *testing.T) {
	c := newRunInputCache(100)
	for i := range 10 {
		c.put(fmt.Sprint(i), bytes.Repeat([]byte("x"), 30))
	}
	if c.bytes != 90 || c.order.Len() != 3 {
		t.Fatalf("after ten inputs of 30 bytes: %d bytes in %d entries, want 90 in 3", c.bytes, c.order.Len())
	}
	if c.get("6") != nil || c.get("7") == nil {
		t.Error("the oldest inputs should have gone first")
	}
	c.get("7") // now the most recent
	c.put("big", bytes.Repeat([]byte("y"), 60))
	if c.get("7") == nil || c.get("8") != nil || c.get("9") != nil || c.bytes != 90 {
		t.Errorf("a 60-byte input should evict the two least recent: bytes %d", c.bytes)
	}
	c.put("huge", bytes.Repeat([]byte("z"), 101))
	if c.get("huge") != nil || c.bytes != 90 {
		t.Errorf("an input over the budget was kept (bytes %d)", c.bytes)
	}
	c.put("7", []byte("1"))
	if string(c.get("7")) != "1" || c.bytes != 61 {
		t.Errorf("replacing an input: bytes %d, want 61", c.bytes)
	}
}
