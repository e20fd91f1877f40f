/* sql_call: runs SQL statements through the host, for the worker's and the sandbox's tests.
 * input.run: {"statements": [{"sql": "...", "params": [...]}, ...], "fail": "message",
 *             "fail_on_attempt": N}
 * Sends each statement as the ABI's request and returns {"results": [<each result JSON>]}.
 * A parameter written "{{idempotency_key}}" or "{{attempt}}" is replaced by the context's
 * value. A statement the host refuses or PostgreSQL fails fails the task with the host's
 * message; "fail" fails the task after every statement ran (its writes must then not be
 * kept), "fail_on_attempt" only on that attempt. */
#include "pgflow.h"
#include "pgflow_json.h"

static int fail_with_host_error(void) {
	char *msg = pgflow_last_error();
	int status = pgflow_fail(msg ? msg : "out of memory");
	free(msg);
	return status;
}

/* request writes the ABI request of one statement object, with the placeholders filled. */
static void request(pj_buf *b, pj_value stmt, pj_value key, pj_value attempt) {
	pj_value sql, params, p;
	pj_buf_puts(b, "{\"sql\":");
	if (pj_get(stmt, "sql", &sql)) pj_buf_append(b, sql.p, (size_t)(sql.end - sql.p));
	else pj_buf_puts(b, "null");
	pj_buf_puts(b, ",\"params\":[");
	const char *cursor = NULL;
	int n = 0;
	if (pj_get(stmt, "params", &params)) {
		while (pj_next(params, &cursor, NULL, &p)) {
			if (n++ > 0) pj_buf_puts(b, ",");
			if (pj_type(p) == PJ_STRING && pj_string_equals(p, "{{idempotency_key}}")) p = key;
			else if (pj_type(p) == PJ_STRING && pj_string_equals(p, "{{attempt}}")) p = attempt;
			pj_buf_append(b, p.p, (size_t)(p.end - p.p));
		}
	}
	pj_buf_puts(b, "]}");
}

static int sql_call(pgflow_bytes input, pgflow_bytes context) {
	pj_value root, run, stmts, item, v, ctx, key, attempt;
	if (!pj_parse(context.data, context.len, &ctx) || !pj_get(ctx, "idempotency_key", &key) || !pj_get(ctx, "attempt", &attempt)) {
		key.p = "null", key.end = key.p + 4;
		attempt = key;
	}
	if (!pj_parse(input.data, input.len, &root) || !pj_get(root, "run", &run) || !pj_get(run, "statements", &stmts) ||
	    pj_type(stmts) != PJ_ARRAY)
		return pgflow_fail("sql_call: input.run.statements must be an array");
	pj_buf out = {0};
	pj_buf_puts(&out, "{\"results\":[");
	const char *cursor = NULL;
	int n = 0;
	while (pj_next(stmts, &cursor, NULL, &item)) {
		char *result;
		size_t len;
		pj_buf req = {0};
		request(&req, item, key, attempt);
		int rc = pgflow_sql(req.data, req.len, &result, &len);
		pj_buf_free(&req);
		if (rc != 0) {
			pj_buf_free(&out);
			return fail_with_host_error();
		}
		if (n++ > 0) pj_buf_puts(&out, ",");
		pj_buf_append(&out, result, len);
		free(result);
	}
	pj_buf_puts(&out, "]}");
	double on = 0, now = 0;
	if (pj_get(run, "fail_on_attempt", &v) && pj_number(v, &on) && pj_number(attempt, &now) && on == now) {
		pj_buf_free(&out);
		return pgflow_fail("sql_call: failing this attempt on purpose, after its statements");
	}
	if (pj_get(run, "fail", &v) && pj_type(v) == PJ_STRING) {
		size_t len;
		char *msg = pj_string_dup(v, &len);
		int status = pgflow_fail(msg);
		free(msg);
		pj_buf_free(&out);
		return status;
	}
	int status = pgflow_output(out.data, out.len);
	pj_buf_free(&out);
	return status;
}

PGFLOW_HANDLER(sql_call)
