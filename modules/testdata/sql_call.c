/* sql_call: runs SQL statements through the host, for the worker's and the sandbox's tests.
 * input.run: {"statements": [{"sql": "...", "params": [...]}, ...], "fail": "message"}
 * Sends each statement object as it is (it is the ABI's request) and returns
 * {"results": [<each result JSON>]}. A statement the host refuses or PostgreSQL fails
 * fails the task with the host's message; "fail" fails the task after every statement ran
 * (its writes must then not be kept). */
#include "pgflow.h"
#include "pgflow_json.h"

static int fail_with_host_error(void) {
	char *msg = pgflow_last_error();
	int status = pgflow_fail(msg ? msg : "out of memory");
	free(msg);
	return status;
}

static int sql_call(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value root, run, stmts, item, v;
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
		if (pgflow_sql(item.p, (size_t)(item.end - item.p), &result, &len) != 0) {
			pj_buf_free(&out);
			return fail_with_host_error();
		}
		if (n++ > 0) pj_buf_puts(&out, ",");
		pj_buf_append(&out, result, len);
		free(result);
	}
	pj_buf_puts(&out, "]}");
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
