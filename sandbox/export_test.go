package sandbox

import "math/rand/v2"

// RandomBytesOf returns the first n bytes random_get gives a task with this seed.
func RandomBytesOf(seed []byte, n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(taskSeed(seed)).Read(b)
	return b
}

// Instantiations counts the instances m made for tasks: fewer than its tasks where reset
// instances served some.
func Instantiations(m Module) int64 { return m.(*module).instantiated.Load() }
