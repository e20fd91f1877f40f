//go:build wasmtime

// The epoch-deadline callback of wasmtime's C API, which wasmtime-go does not wrap: it lets
// a store that reached its epoch deadline ask Go whether to go on (wasmtime_epoch.go).
#include <stdint.h>
#include <stddef.h>

typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_error wasmtime_error_t;

extern void wasmtime_store_epoch_deadline_callback(
    wasmtime_store_t *store,
    wasmtime_error_t *(*func)(wasmtime_context_t *, void *, uint64_t *, uint8_t *),
    void *data, void (*finalizer)(void *));
extern wasmtime_error_t *wasmtime_error_new(const char *message);

// Defined in Go (//export).
extern int pgflowEpochDeadline(uintptr_t watch, uint64_t *delta);

static wasmtime_error_t *pgflow_epoch_deadline(wasmtime_context_t *ctx, void *data, uint64_t *delta, uint8_t *kind) {
	(void)ctx;
	*kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
	if (pgflowEpochDeadline((uintptr_t)data, delta)) {
		return wasmtime_error_new("pgflow-wasm: the call was interrupted");
	}
	return NULL;
}

void pgflow_set_epoch_callback(void *store, uintptr_t watch) {
	wasmtime_store_epoch_deadline_callback((wasmtime_store_t *)store, pgflow_epoch_deadline, (void *)watch, NULL);
}
