/* echo: returns input.run.value exactly as given (its JSON text, byte for byte), or the
 * whole input when there is no run.value. Lets worker tests check outputs such as 0, false,
 * "" and null. */
#include "pgflow.h"
#include "pgflow_json.h"

static int echo(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value root, run, value;
	if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("echo: invalid JSON input");
	if (pj_get(root, "run", &run) && pj_get(run, "value", &value))
		return pgflow_output(value.p, (size_t)(value.end - value.p));
	return pgflow_output(input.data, input.len);
}

PGFLOW_HANDLER(echo)
