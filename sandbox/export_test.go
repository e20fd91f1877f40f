package sandbox

import "math/rand/v2"

// FirstRandomBytes returns the first n bytes every fresh instance gets from random_get.
func FirstRandomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(randSeed).Read(b)
	return b
}
