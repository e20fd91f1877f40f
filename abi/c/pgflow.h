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

/* Host functions (module "pgflow"); every pointer and length is an i32. Off wasm (a
 * native unit test) they are plain functions: pgflow_testhost.h defines them. */
#ifdef __wasm__
#define PGFLOW_IMPORT_(name) __attribute__((import_module("pgflow"), import_name(name)))
#define PGFLOW_EXPORT_(name) __attribute__((export_name(name)))
#else
#define PGFLOW_IMPORT_(name)
#define PGFLOW_EXPORT_(name)
#endif
PGFLOW_IMPORT_("input_read") void pgflow_host_input_read(void *ptr);
PGFLOW_IMPORT_("context_read") void pgflow_host_context_read(void *ptr);
PGFLOW_IMPORT_("output_write") void pgflow_host_output_write(const void *ptr, size_t len);
PGFLOW_IMPORT_("error_write") void pgflow_host_error_write(const void *ptr, size_t len);
PGFLOW_IMPORT_("log") void pgflow_host_log(int level, const void *ptr, size_t len);

/* Capabilities (optional imports; a step grants them in flows.yaml, see ../SPEC.md). */
PGFLOW_IMPORT_("http_request") int pgflow_host_http_request(const void *method, size_t method_len, const void *url,
                                                            size_t url_len, const void *headers, size_t headers_len,
                                                            const void *body, size_t body_len);
PGFLOW_IMPORT_("http_response_read") int pgflow_host_http_response_read(int part, void *ptr, size_t cap);
PGFLOW_IMPORT_("config_get") int pgflow_host_config_get(const void *name, size_t name_len, void *ptr, size_t cap);
PGFLOW_IMPORT_("last_error") int pgflow_host_last_error(void *ptr, size_t cap);
PGFLOW_IMPORT_("sql_query") int pgflow_host_sql_query(const void *request, size_t request_len);
PGFLOW_IMPORT_("sql_result_read") int pgflow_host_sql_result_read(void *ptr, size_t cap);

/* Error codes of pgflow_http, pgflow_config and pgflow_sql (the host's, plus one of the library). */
#define PGFLOW_E_DENIED -1             /* the step has no `http` (`sql`) key, or the name is not in its `env` list */
#define PGFLOW_E_HOST_NOT_ALLOWED -2   /* the host (or a redirect's) matches no http.allow entry */
#define PGFLOW_E_ADDRESS_REFUSED -3    /* loopback, private, link-local, metadata... not named by http.allow */
#define PGFLOW_E_TOO_MANY_REQUESTS -4  /* over http.max_requests in this task */
#define PGFLOW_E_RESPONSE_TOO_LARGE -5 /* over http.max_response_bytes */
#define PGFLOW_E_REQUEST_TOO_LARGE -6  /* over http.max_request_bytes (or headers over 64 KiB) */
#define PGFLOW_E_BAD_REQUEST -7        /* invalid method, URL, scheme or header */
#define PGFLOW_E_NETWORK -8            /* DNS, connection, TLS or protocol failure */
#define PGFLOW_E_TOO_MANY_REDIRECTS -9
#define PGFLOW_E_NOT_SET -10     /* config: listed in `env` but not set in the worker's environment */
#define PGFLOW_E_SQL_REFUSED -11 /* sql: the statement filter refused the statement */
#define PGFLOW_E_SQL_FAILED -12  /* sql: PostgreSQL raised an error (the message names its SQLSTATE) */
#define PGFLOW_E_NO_MEMORY -100  /* the guest could not allocate the response */

/* A response. An error status (404, 500) is a response like any other. headers holds
 * "Name: value\n" lines (names canonical, sorted); headers and body are NUL-terminated
 * copies owned by the caller: free them with pgflow_http_free. */
typedef struct {
	int status;
	char *headers;
	size_t headers_len;
	char *body;
	size_t body_len;
} pgflow_http_response;

/* The message of the last failed pgflow_http or pgflow_config: what happened and which
 * flows.yaml key to change. A fresh NUL-terminated string (free it), NULL without memory. */
static inline char *pgflow_last_error(void) {
	int n = pgflow_host_last_error(NULL, 0);
	char *buf = (char *)malloc((size_t)n + 1);
	if (buf == NULL) return NULL;
	if (n > 0) pgflow_host_last_error(buf, (size_t)n);
	buf[n] = '\0';
	return buf;
}

/* Copies part 0 (headers) or 1 (body) of the last response into a fresh NUL-terminated buffer. */
static inline char *pgflow_response_part_(int part, size_t *len) {
	int n = pgflow_host_http_response_read(part, NULL, 0);
	char *buf = (char *)malloc((size_t)n + 1);
	if (buf == NULL) return NULL;
	if (n > 0) pgflow_host_http_response_read(part, buf, (size_t)n);
	buf[n] = '\0';
	*len = (size_t)n;
	return buf;
}

/* Sends an HTTP request: method ("GET", "POST", ...), an absolute http(s) URL, headers as
 * "Name: value\n" lines (or NULL) and a body (or NULL, 0). Returns 0 and fills *resp, or a
 * negative PGFLOW_E_* code; pgflow_last_error() then says why. */
static inline int pgflow_http(const char *method, const char *url, const char *headers, const void *body,
                              size_t body_len, pgflow_http_response *resp) {
	memset(resp, 0, sizeof *resp);
	int status = pgflow_host_http_request(method, strlen(method), url, strlen(url), headers,
	                                      headers ? strlen(headers) : 0, body, body ? body_len : 0);
	if (status < 0) return status;
	resp->status = status;
	resp->headers = pgflow_response_part_(0, &resp->headers_len);
	resp->body = pgflow_response_part_(1, &resp->body_len);
	if (resp->headers == NULL || resp->body == NULL) {
		free(resp->headers), free(resp->body);
		memset(resp, 0, sizeof *resp);
		return PGFLOW_E_NO_MEMORY;
	}
	return 0;
}

static inline void pgflow_http_free(pgflow_http_response *resp) {
	free(resp->headers), free(resp->body);
	memset(resp, 0, sizeof *resp);
}

/* Reads a named value the step may see (its `env` list in flows.yaml): 0 and a fresh
 * NUL-terminated copy in *value (free it; len may be NULL), or a negative PGFLOW_E_* code
 * with the reason in pgflow_last_error(). */
static inline int pgflow_config(const char *name, char **value, size_t *len) {
	*value = NULL;
	size_t name_len = strlen(name);
	int n = pgflow_host_config_get(name, name_len, NULL, 0);
	if (n < 0) return n;
	char *buf = (char *)malloc((size_t)n + 1);
	if (buf == NULL) return PGFLOW_E_NO_MEMORY;
	if (n > 0) pgflow_host_config_get(name, name_len, buf, (size_t)n);
	buf[n] = '\0';
	*value = buf;
	if (len != NULL) *len = (size_t)n;
	return 0;
}

/* Runs one SQL statement as the step's role (its `sql` section in flows.yaml). request is
 * the JSON {"sql": "insert into t values ($1, $2)", "params": [1, "x"]}: values travel as
 * parameters, never inside the statement. Returns 0 and a fresh NUL-terminated copy of the
 * result JSON in *result ({"columns": [...], "rows": [[...]], "row_count": N, "command":
 * "INSERT 0 1"}; free it; len may be NULL), or a negative PGFLOW_E_* code with the reason
 * (its SQLSTATE when PostgreSQL raised it) in pgflow_last_error(). */
static inline int pgflow_sql(const char *request, size_t request_len, char **result, size_t *len) {
	*result = NULL;
	int n = pgflow_host_sql_query(request, request_len);
	if (n < 0) return n;
	char *buf = (char *)malloc((size_t)n + 1);
	if (buf == NULL) return PGFLOW_E_NO_MEMORY;
	if (n > 0) pgflow_host_sql_result_read(buf, (size_t)n);
	buf[n] = '\0';
	*result = buf;
	if (len != NULL) *len = (size_t)n;
	return 0;
}

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
	PGFLOW_EXPORT_("pgflow_abi_version") int pgflow_abi_version(void) {                      \
		return PGFLOW_ABI_VERSION;                                                          \
	}                                                                                       \
	PGFLOW_EXPORT_("pgflow_handle") int pgflow_handle(int input_len, int context_len) {      \
		return pgflow_run_(handler, input_len, context_len);                               \
	}

#endif /* PGFLOW_H */
