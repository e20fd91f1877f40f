/*
 * pgflow.h: the pgflow-wasm guest ABI, version 1, for C (header-only; see ../SPEC.md).
 *
 * A handler is one function from the input and context JSON to an output or an error:
 *
 *     #include "pgflow.h"
 *
 *     static int hello(pgflow_bytes input, pgflow_bytes context) {
 *         (void)context;
 *         pgflow_log(PGFLOW_LOG_INFO, "saying hello");
 *         if (input.len == 0) return pgflow_fail("empty input");
 *         return pgflow_output_str("{\"hello\":\"world\"}");
 *     }
 *     PGFLOW_HANDLER(hello)
 *
 * Build it as a WASI reactor:
 *
 *     clang --target=wasm32-wasi -O2 -mexec-model=reactor -Wl,--strip-all -I abi/c -o hello.wasm hello.c
 *
 * The bytes in input and context are NUL-terminated copies the handler may read until it
 * returns; they are freed afterwards. abi/c/pgflow_json.h is a small JSON scanner and
 * writer to go with it.
 */
#ifndef PGFLOW_H
#define PGFLOW_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define PGFLOW_ABI_VERSION 1

/* Return values of a handler (and of pgflow_handle). */
#define PGFLOW_OK 0
#define PGFLOW_ERROR 1

/* Log levels of pgflow_log. */
#define PGFLOW_LOG_DEBUG 0
#define PGFLOW_LOG_INFO 1
#define PGFLOW_LOG_WARN 2
#define PGFLOW_LOG_ERROR 3

/* A byte string owned by the caller; data[len] is always a NUL byte. */
typedef struct {
	const char *data;
	size_t len;
} pgflow_bytes;

/* A handler returns PGFLOW_OK after pgflow_output, or PGFLOW_ERROR (use pgflow_fail). */
typedef int (*pgflow_handler)(pgflow_bytes input, pgflow_bytes context);

/* Host functions (module "pgflow"); every pointer and length is an i32. */
#define PGFLOW_IMPORT_(name) __attribute__((import_module("pgflow"), import_name(name)))
PGFLOW_IMPORT_("input_read") void pgflow_host_input_read(void *ptr);
PGFLOW_IMPORT_("context_read") void pgflow_host_context_read(void *ptr);
PGFLOW_IMPORT_("output_write") void pgflow_host_output_write(const void *ptr, size_t len);
PGFLOW_IMPORT_("error_write") void pgflow_host_error_write(const void *ptr, size_t len);
PGFLOW_IMPORT_("log") void pgflow_host_log(int level, const void *ptr, size_t len);

/* Sets the task output to len bytes of JSON; the last call wins. Returns PGFLOW_OK. */
static inline int pgflow_output(const void *json, size_t len) {
	pgflow_host_output_write(json, len);
	return PGFLOW_OK;
}

/* pgflow_output for a NUL-terminated JSON text. */
static inline int pgflow_output_str(const char *json) { return pgflow_output(json, strlen(json)); }

/* Sets the error message of a failed task. Returns PGFLOW_ERROR so a handler can `return pgflow_fail("...")`. */
static inline int pgflow_fail_n(const char *msg, size_t len) {
	pgflow_host_error_write(msg, len);
	return PGFLOW_ERROR;
}

static inline int pgflow_fail(const char *msg) { return pgflow_fail_n(msg, strlen(msg)); }

/* Writes one log line at level (PGFLOW_LOG_*). */
static inline void pgflow_log(int level, const char *msg) { pgflow_host_log(level, msg, strlen(msg)); }

/* Copies len bytes from the host with read() into a fresh NUL-terminated buffer. */
static inline char *pgflow_fetch_(void (*read)(void *), int len) {
	char *buf = (char *)malloc((size_t)len + 1);
	if (buf == NULL) return NULL;
	if (len > 0) read(buf);
	buf[len] = '\0';
	return buf;
}

/* The body of pgflow_handle: fetches input and context, runs the handler, frees both. */
static inline int pgflow_run_(pgflow_handler handler, int input_len, int context_len) {
	if (input_len < 0 || context_len < 0) return pgflow_fail("pgflow_handle: negative length");
	char *input = pgflow_fetch_(pgflow_host_input_read, input_len);
	char *context = pgflow_fetch_(pgflow_host_context_read, context_len);
	int status;
	if (input == NULL || context == NULL) {
		status = pgflow_fail("out of memory reading the task input");
	} else {
		pgflow_bytes in = {input, (size_t)input_len};
		pgflow_bytes ctx = {context, (size_t)context_len};
		status = handler(in, ctx) == PGFLOW_OK ? PGFLOW_OK : PGFLOW_ERROR;
	}
	free(input);
	free(context);
	return status;
}

/* Defines the module's two ABI exports around handler. Use it exactly once per module. */
#define PGFLOW_HANDLER(handler)                                                             \
	__attribute__((export_name("pgflow_abi_version"))) int pgflow_abi_version(void) {        \
		return PGFLOW_ABI_VERSION;                                                          \
	}                                                                                       \
	__attribute__((export_name("pgflow_handle"))) int pgflow_handle(int input_len, int context_len) { \
		return pgflow_run_(handler, input_len, context_len);                               \
	}

#endif /* PGFLOW_H */
