/* __NAME__: a pgflow-wasm step handler. It gets the step input and the task context as
 * JSON and returns the output JSON, or an error that fails the task. */
#include "pgflow.h"
#include "pgflow_json.h"

static int handle(pgflow_bytes input, pgflow_bytes context) {
	pj_value root, run, name, ctx, attempt;
	if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("__NAME__: invalid input JSON");
	/* The flow input is under "run"; a step with dependencies also gets their outputs. */
	if (!pj_get(root, "run", &run) || !pj_get(run, "name", &name) || pj_type(name) != PJ_STRING)
		return pgflow_fail("__NAME__: input.run.name must be a string, e.g. {\"name\": \"Ada\"}");
	if (!pj_parse(context.data, context.len, &ctx) || !pj_get(ctx, "attempt", &attempt))
		return pgflow_fail("__NAME__: invalid context");

	size_t len;
	char *who = pj_string_dup(name, &len);
	if (who == NULL) return pgflow_fail("__NAME__: out of memory");
	pj_buf line = {0}, greeting = {0}, out = {0};
	pj_buf_puts(&line, "greeting "), pj_buf_append(&line, who, len);
	pj_buf_puts(&line, ", attempt "), pj_buf_append(&line, attempt.p, (size_t)(attempt.end - attempt.p));
	pj_buf_append(&line, "", 1); /* NUL for pgflow_log */
	pj_buf_puts(&greeting, "Hello, "), pj_buf_append(&greeting, who, len), pj_buf_puts(&greeting, "!");
	pj_buf_puts(&out, "{\"greeting\":"), pj_buf_quote(&out, greeting.data, greeting.len), pj_buf_puts(&out, "}");
	int status;
	if (line.failed || greeting.failed || out.failed) {
		status = pgflow_fail("__NAME__: out of memory");
	} else {
		pgflow_log(PGFLOW_LOG_INFO, line.data);
		status = pgflow_output(out.data, out.len);
	}
	free(who), pj_buf_free(&line), pj_buf_free(&greeting), pj_buf_free(&out);
	return status;
}

PGFLOW_HANDLER(handle)
