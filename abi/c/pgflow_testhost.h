/*
 * pgflow_testhost.h: a stand-in for the pgflow-wasm worker in native unit tests of a C
 * handler (compiled with the machine's cc, not for wasm). Include it in exactly one test
 * file; it defines the host functions pgflow.h imports on wasm, and pgflow_test_call calls
 * the handler's pgflow_handle as the worker calls it for one task:
 *
 *     #include "pgflow_testhost.h"
 *     int pgflow_handle(int input_len, int context_len);   (defined by PGFLOW_HANDLER)
 *
 *     int main(void) {
 *         pgflow_test_result r;
 *         pgflow_test_call("{\"run\":{\"name\":\"Ada\"}}", pgflow_test_context("hello", "hello"), &r);
 *         PGFLOW_EXPECT(r.status == PGFLOW_OK && strcmp(r.output, "{\"greeting\":\"Hello, Ada!\"}") == 0);
 *         pgflow_test_free(&r);
 *         return pgflow_test_summary();
 *     }
 *
 *     cc -I pgflow -o hello_test hello.c hello_test.c && ./hello_test
 *
 * Nothing is granted until the test grants it: pgflow_test_grant_config for a name of the
 * step's `env` list, pgflow_test_grant_http for its `http` key, pgflow_test_grant_sql for
 * its `sql` key.
 */
#ifndef PGFLOW_TESTHOST_H
#define PGFLOW_TESTHOST_H

#ifdef __wasm__
#error "pgflow_testhost.h is for native unit tests; a handler module includes only pgflow.h"
#endif

#include <stdio.h>

#include "pgflow.h"

/* What one call handed back. Free it with pgflow_test_free. */
typedef struct {
	int status;        /* what pgflow_handle returned: PGFLOW_OK or PGFLOW_ERROR */
	char *output;      /* the last pgflow_output, NUL-terminated; NULL when there was none */
	size_t output_len; /* its length in bytes */
	char *error;       /* the last pgflow_fail message, NUL-terminated; NULL when none */
	char *logs;        /* every log line as "<level> <message>\n" (debug, info, warn, error); "" when none */
} pgflow_test_result;

/* The answer of an HTTP responder: status 100-599, headers as "Name: value\n" lines (or
 * NULL), a body; or, to refuse the request, error set to a negative PGFLOW_E_* code and
 * message to the host's explanation. */
typedef struct {
	int status;
	const char *headers;
	const char *body;
	size_t body_len;
	int error;
	const char *message;
} pgflow_test_reply;

typedef void (*pgflow_test_http_fn)(const char *method, const char *url, const char *headers, const char *body,
                                    size_t body_len, pgflow_test_reply *reply);

/* The answer of an SQL responder: result (the result JSON), or, to fail the statement,
 * error set to a negative PGFLOW_E_* code and message to the host's explanation. */
typedef struct {
	const char *result;
	int error;
	const char *message;
} pgflow_test_sql_reply;

/* request is the JSON the handler sent: {"sql": "...", "params": [...]}. */
typedef void (*pgflow_test_sql_fn)(const char *request, pgflow_test_sql_reply *reply);

/* The host's state for the call in progress. */
static struct {
	const char *input, *context;
	size_t input_len, context_len;
	pgflow_test_result *result;
	size_t logs_len;
	const char *config_names[32], *config_values[32];
	int config_count;
	pgflow_test_http_fn http;
	pgflow_test_sql_fn sql;
	char *sql_result;
	char *response_headers, *response_body;
	size_t response_headers_len, response_body_len;
	char *last_error;
	int failures;
} pgflow_test_;

static char *pgflow_test_dup_(const char *p, size_t len) {
	char *s = (char *)malloc(len + 1);
	if (s == NULL) {
		fprintf(stderr, "pgflow test host: out of memory\n");
		exit(2);
	}
	if (len > 0) memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

static void pgflow_test_set_error_(const char *msg) {
	free(pgflow_test_.last_error);
	pgflow_test_.last_error = pgflow_test_dup_(msg, strlen(msg));
}

/* Copies up to cap bytes of data to ptr and returns the whole length: the ABI's pull pattern. */
static int pgflow_test_copy_(const char *data, size_t len, void *ptr, size_t cap) {
	if (ptr != NULL && cap > 0 && len > 0) memcpy(ptr, data, len < cap ? len : cap);
	return (int)len;
}

/* Grants a named value (a name of the step's `env` list, with its value). */
static inline void pgflow_test_grant_config(const char *name, const char *value) {
	if (pgflow_test_.config_count < 32) {
		pgflow_test_.config_names[pgflow_test_.config_count] = name;
		pgflow_test_.config_values[pgflow_test_.config_count++] = value;
	}
}

/* Grants HTTP: responder answers every request. */
static inline void pgflow_test_grant_http(pgflow_test_http_fn responder) { pgflow_test_.http = responder; }

/* Grants SQL: responder answers every statement. */
static inline void pgflow_test_grant_sql(pgflow_test_sql_fn responder) { pgflow_test_.sql = responder; }

/* Takes back every grant. */
static inline void pgflow_test_revoke_all(void) {
	pgflow_test_.config_count = 0;
	pgflow_test_.http = NULL;
	pgflow_test_.sql = NULL;
}

/* A context JSON like the worker's for a task of step in flow: first attempt, task 0, fixed ids. */
static inline const char *pgflow_test_context(const char *flow, const char *step) {
	static char buf[1024];
	const char *run_id = "00000000-0000-4000-8000-000000000001";
	snprintf(buf, sizeof buf,
	         "{\"run_id\":\"%s\",\"flow_slug\":\"%s\",\"step_slug\":\"%s\",\"task_index\":0,\"attempt\":1,"
	         "\"msg_id\":1,\"flow_input\":null,\"worker_id\":\"00000000-0000-4000-8000-000000000002\","
	         "\"timeout_ms\":60000,\"idempotency_key\":\"%s:%s:0\"}",
	         run_id, flow, step, run_id, step);
	return buf;
}

int pgflow_handle(int input_len, int context_len);

/* Calls the handler once with input and context (NUL-terminated JSON texts) and fills r. */
static inline int pgflow_test_call(const char *input, const char *context, pgflow_test_result *r) {
	memset(r, 0, sizeof *r);
	r->logs = pgflow_test_dup_("", 0);
	pgflow_test_.input = input, pgflow_test_.input_len = strlen(input);
	pgflow_test_.context = context, pgflow_test_.context_len = strlen(context);
	pgflow_test_.result = r;
	pgflow_test_.logs_len = 0;
	r->status = pgflow_handle((int)pgflow_test_.input_len, (int)pgflow_test_.context_len);
	pgflow_test_.result = NULL;
	free(pgflow_test_.response_headers), free(pgflow_test_.response_body), free(pgflow_test_.last_error);
	free(pgflow_test_.sql_result);
	pgflow_test_.response_headers = pgflow_test_.response_body = pgflow_test_.last_error = pgflow_test_.sql_result = NULL;
	pgflow_test_.response_headers_len = pgflow_test_.response_body_len = 0;
	return r->status;
}

static inline void pgflow_test_free(pgflow_test_result *r) {
	free(r->output), free(r->error), free(r->logs);
	memset(r, 0, sizeof *r);
}

/* Checks cond; on failure prints the file, line and expression and counts it. */
#define PGFLOW_EXPECT(cond)                                                                  \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);  \
			pgflow_test_.failures++;                                             \
		}                                                                            \
	} while (0)

/* Prints a summary; returns the exit status for main (0 when every expectation held). */
static inline int pgflow_test_summary(void) {
	if (pgflow_test_.failures > 0) {
		fprintf(stderr, "FAIL: %d expectation(s) failed\n", pgflow_test_.failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}

/* --- The host functions pgflow.h declares (imports on wasm) ---------------------------- */

void pgflow_host_input_read(void *ptr) { memcpy(ptr, pgflow_test_.input, pgflow_test_.input_len); }

void pgflow_host_context_read(void *ptr) { memcpy(ptr, pgflow_test_.context, pgflow_test_.context_len); }

void pgflow_host_output_write(const void *ptr, size_t len) {
	pgflow_test_result *r = pgflow_test_.result;
	if (r == NULL) return;
	free(r->output);
	r->output = pgflow_test_dup_((const char *)ptr, len);
	r->output_len = len;
}

void pgflow_host_error_write(const void *ptr, size_t len) {
	pgflow_test_result *r = pgflow_test_.result;
	if (r == NULL) return;
	free(r->error);
	r->error = pgflow_test_dup_((const char *)ptr, len);
}

void pgflow_host_log(int level, const void *ptr, size_t len) {
	static const char *names[] = {"debug", "info", "warn", "error"};
	pgflow_test_result *r = pgflow_test_.result;
	if (r == NULL) return;
	const char *name = level >= 0 && level <= 3 ? names[level] : "error";
	size_t add = strlen(name) + 1 + len + 1;
	char *logs = (char *)realloc(r->logs, pgflow_test_.logs_len + add + 1);
	if (logs == NULL) return;
	char *p = logs + pgflow_test_.logs_len;
	memcpy(p, name, strlen(name)), p += strlen(name), *p++ = ' ';
	memcpy(p, ptr, len), p += len, *p++ = '\n', *p = '\0';
	r->logs = logs, pgflow_test_.logs_len += add;
}

int pgflow_host_http_request(const void *method, size_t method_len, const void *url, size_t url_len,
                             const void *headers, size_t headers_len, const void *body, size_t body_len) {
	free(pgflow_test_.response_headers), free(pgflow_test_.response_body);
	pgflow_test_.response_headers = pgflow_test_.response_body = NULL;
	pgflow_test_.response_headers_len = pgflow_test_.response_body_len = 0;
	if (pgflow_test_.http == NULL) {
		pgflow_test_set_error_("pgflow test host: HTTP is denied (grant it with pgflow_test_grant_http, as a step's "
		                       "`http` key in flows.yaml does)");
		return PGFLOW_E_DENIED;
	}
	char *m = pgflow_test_dup_((const char *)method, method_len), *u = pgflow_test_dup_((const char *)url, url_len);
	char *h = pgflow_test_dup_((const char *)headers, headers_len), *b = pgflow_test_dup_((const char *)body, body_len);
	pgflow_test_reply reply = {0};
	pgflow_test_.http(m[0] ? m : "GET", u, h, b, body_len, &reply);
	free(m), free(u), free(h), free(b);
	if (reply.error < 0) {
		pgflow_test_set_error_(reply.message ? reply.message : "refused by the test responder");
		return reply.error;
	}
	if (reply.status < 100 || reply.status > 599) {
		pgflow_test_set_error_("pgflow test host: the responder set no status (100-599)");
		return PGFLOW_E_NETWORK;
	}
	const char *hs = reply.headers ? reply.headers : "";
	pgflow_test_.response_headers = pgflow_test_dup_(hs, strlen(hs));
	pgflow_test_.response_headers_len = strlen(hs);
	pgflow_test_.response_body = pgflow_test_dup_(reply.body ? reply.body : "", reply.body ? reply.body_len : 0);
	pgflow_test_.response_body_len = reply.body ? reply.body_len : 0;
	return reply.status;
}

int pgflow_host_http_response_read(int part, void *ptr, size_t cap) {
	if (part == 0) return pgflow_test_copy_(pgflow_test_.response_headers, pgflow_test_.response_headers_len, ptr, cap);
	return pgflow_test_copy_(pgflow_test_.response_body, pgflow_test_.response_body_len, ptr, cap);
}

int pgflow_host_config_get(const void *name, size_t name_len, void *ptr, size_t cap) {
	for (int i = 0; i < pgflow_test_.config_count; i++) {
		const char *n = pgflow_test_.config_names[i];
		if (strlen(n) == name_len && memcmp(n, name, name_len) == 0) {
			const char *v = pgflow_test_.config_values[i];
			return pgflow_test_copy_(v, strlen(v), ptr, cap);
		}
	}
	pgflow_test_set_error_("pgflow test host: the name is not granted (pgflow_test_grant_config; a step reads only "
	                       "the names of its `env` list)");
	return PGFLOW_E_DENIED;
}

int pgflow_host_sql_query(const void *request, size_t request_len) {
	free(pgflow_test_.sql_result);
	pgflow_test_.sql_result = NULL;
	if (pgflow_test_.sql == NULL) {
		pgflow_test_set_error_("pgflow test host: SQL is denied (grant it with pgflow_test_grant_sql, as a step's "
		                       "`sql` key in flows.yaml does)");
		return PGFLOW_E_DENIED;
	}
	char *req = pgflow_test_dup_((const char *)request, request_len);
	pgflow_test_sql_reply reply = {0};
	pgflow_test_.sql(req, &reply);
	free(req);
	if (reply.error < 0) {
		pgflow_test_set_error_(reply.message ? reply.message : "refused by the test responder");
		return reply.error;
	}
	const char *r = reply.result ? reply.result : "";
	pgflow_test_.sql_result = pgflow_test_dup_(r, strlen(r));
	return (int)strlen(r);
}

int pgflow_host_sql_result_read(void *ptr, size_t cap) {
	const char *r = pgflow_test_.sql_result ? pgflow_test_.sql_result : "";
	return pgflow_test_copy_(r, strlen(r), ptr, cap);
}

int pgflow_host_last_error(void *ptr, size_t cap) {
	const char *e = pgflow_test_.last_error ? pgflow_test_.last_error : "";
	return pgflow_test_copy_(e, strlen(e), ptr, cap);
}

#endif /* PGFLOW_TESTHOST_H */
