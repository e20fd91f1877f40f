/* http_call: the fetch example in C, with knobs for the worker's and the sandbox's tests.
 * input.run: {"url": "...", "times": 1, "method": "GET", "body": "...",
 *             "token_env": "NAME", "idempotency": true}
 * Sends `times` requests (default 1) and returns {"status": <last status>, "bytes": <its
 * body length>}. token_env sends `Authorization: Bearer <the named value>`; idempotency
 * sends the context's idempotency_key as Idempotency-Key. A refused request fails the task
 * with the host's message. */
#include "pgflow.h"
#include "pgflow_json.h"

static char *string_member(pj_value obj, const char *name) {
	pj_value v;
	size_t len;
	if (!pj_get(obj, name, &v) || pj_type(v) != PJ_STRING) return NULL;
	return pj_string_dup(v, &len);
}

static int fail_with_host_error(void) {
	char *msg = pgflow_last_error();
	int status = pgflow_fail(msg ? msg : "out of memory");
	free(msg);
	return status;
}

static int http_call(pgflow_bytes input, pgflow_bytes context) {
	pj_value root, run, v, ctx;
	if (!pj_parse(input.data, input.len, &root) || !pj_get(root, "run", &run))
		return pgflow_fail("http_call: input.run must be an object");
	char *url = string_member(run, "url");
	if (url == NULL) return pgflow_fail("http_call: input.run.url must be a string");
	char *method = string_member(run, "method");
	char *body = string_member(run, "body");
	char *token_env = string_member(run, "token_env");
	double times = 1;
	if (pj_get(run, "times", &v)) pj_number(v, &times);

	pj_buf headers = {0};
	int status = PGFLOW_OK;
	if (token_env != NULL) {
		char *token;
		if (pgflow_config(token_env, &token, NULL) != 0) {
			status = fail_with_host_error();
			goto done;
		}
		pj_buf_puts(&headers, "Authorization: Bearer "), pj_buf_puts(&headers, token), pj_buf_puts(&headers, "\n");
		free(token);
	}
	if (pj_get(run, "idempotency", &v) && pj_type(v) == PJ_TRUE && pj_parse(context.data, context.len, &ctx) &&
	    pj_get(ctx, "idempotency_key", &v)) {
		size_t len;
		char *key = pj_string_dup(v, &len);
		pj_buf_puts(&headers, "Idempotency-Key: "), pj_buf_puts(&headers, key), pj_buf_puts(&headers, "\n");
		free(key);
	}
	pj_buf_append(&headers, "", 1); /* NUL-terminate */

	pgflow_http_response resp = {0};
	for (int i = 0; i < (int)times; i++) {
		pgflow_http_free(&resp);
		if (pgflow_http(method ? method : "GET", url, headers.data, body, body ? strlen(body) : 0, &resp) != 0) {
			status = fail_with_host_error();
			goto done;
		}
	}
	pj_buf out = {0};
	pj_buf_puts(&out, "{\"status\":"), pj_buf_number(&out, resp.status);
	pj_buf_puts(&out, ",\"bytes\":"), pj_buf_number(&out, (double)resp.body_len), pj_buf_puts(&out, "}");
	status = pgflow_output(out.data, out.len);
	pj_buf_free(&out);
	pgflow_http_free(&resp);
done:
	pj_buf_free(&headers);
	free(url), free(method), free(body), free(token_env);
	return status;
}

PGFLOW_HANDLER(http_call)
