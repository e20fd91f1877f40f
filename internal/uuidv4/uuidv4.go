// Package uuidv4 makes random (version 4) UUIDs without a dependency.
package uuidv4

import (
	"crypto/rand"
	"fmt"
)

// New returns a random UUID in its canonical text form.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
