/* flaky: fails with "attempt <N> failed" while the context's attempt N is below
 * input.run.succeed_on (default 3), then returns {"attempt":N}. For retry tests. */
#include "pgflow.h"
#include "pgflow_json.h"

/* Reads an integral number member of obj into *out; 0 when absent, -1 when not an integer. */
static int get_int(pj_value obj, const char *name, long long *out) {
	pj_value v;
	double d;
	if (!pj_get(obj, name, &v)) return 0;
	if (!pj_number(v, &d) || d != (double)(long long)d) return -1;
	*out = (long long)d;
	return 1;
}

static int flaky(pgflow_bytes input, pgflow_bytes context) {
	pj_value in, ctx, run;
	long long attempt, succeed_on = 3;
	char msg[64];
	if (!pj_parse(input.data, input.len, &in)) return pgflow_fail("flaky: invalid JSON input");
	if (!pj_parse(context.data, context.len, &ctx) || get_int(ctx, "attempt", &attempt) != 1)
		return pgflow_fail("flaky: the context has no integer attempt");
	if (pj_get(in, "run", &run) && get_int(run, "succeed_on", &succeed_on) < 0)
		return pgflow_fail("flaky: input.run.succeed_on must be an integer");
	if (attempt < succeed_on) {
		snprintf(msg, sizeof msg, "attempt %lld failed", attempt);
		return pgflow_fail(msg);
	}
	snprintf(msg, sizeof msg, "{\"attempt\":%lld}", attempt);
	return pgflow_output_str(msg);
}

PGFLOW_HANDLER(flaky)
