/* work: busy-loops input.run.iterations times (default 1000000), then returns {"ok":true}.
 * Slow but finite: keeps tasks running while a test kills a worker. */
#include "pgflow.h"
#include "pgflow_json.h"

static int work(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value in, run, v;
	double iterations = 1000000;
	if (!pj_parse(input.data, input.len, &in)) return pgflow_fail("work: invalid JSON input");
	if (pj_get(in, "run", &run) && pj_get(run, "iterations", &v)) {
		if (!pj_number(v, &iterations) || iterations < 0 || iterations > 9007199254740992.0 ||
		    iterations != (double)(unsigned long long)iterations)
			return pgflow_fail("work: input.run.iterations must be a non-negative integer");
	}
	volatile unsigned long long done = 0;
	for (unsigned long long i = 0, n = (unsigned long long)iterations; i < n; i++) done++;
	return pgflow_output_str("{\"ok\":true}");
}

PGFLOW_HANDLER(work)
