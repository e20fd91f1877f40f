/* greet: {"run": {"name": "Ada"}} -> {"greeting":"Hello, Ada!"} */
#include "pgflow.h"
#include "pgflow_json.h"

static int greet(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value root, run, name;
	if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("greet: invalid JSON input");
	if (!pj_get(root, "run", &run) || !pj_get(run, "name", &name) || pj_type(name) != PJ_STRING)
		return pgflow_fail("greet: input.run.name must be a string");

	size_t len;
	char *who = pj_string_dup(name, &len);
	pj_buf greeting = {0}, out = {0};
	if (who == NULL) return pgflow_fail("greet: out of memory");
	pj_buf_puts(&greeting, "Hello, ");
	pj_buf_append(&greeting, who, len);
	pj_buf_puts(&greeting, "!");
	pj_buf_puts(&out, "{\"greeting\":");
	pj_buf_quote(&out, greeting.data, greeting.len);
	pj_buf_puts(&out, "}");
	int status = greeting.failed || out.failed ? pgflow_fail("greet: out of memory") : pgflow_output(out.data, out.len);
	free(who);
	pj_buf_free(&greeting);
	pj_buf_free(&out);
	return status;
}

PGFLOW_HANDLER(greet)
