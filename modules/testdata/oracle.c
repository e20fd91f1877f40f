/* oracle: returns {"context": <its context>, "input": <its input>}, both byte for byte, so a
 * test (and pgtest's audit) can check that every stored output belongs to its own task and
 * attempt and that the handler got the input pgflow builds for it. When the input says how
 * (run.iterations for a single step, iterations in a map element), it first busy-loops that
 * many times, to keep tasks running while a test kills or restarts something. */
#include <stdlib.h>
#include "pgflow.h"
#include "pgflow_json.h"

/* iterations finds input.run.iterations or input.iterations; 0 when absent. */
static int iterations(pgflow_bytes input, unsigned long long *n) {
	pj_value root, run, v;
	double d;
	*n = 0;
	if (!pj_parse(input.data, input.len, &root) || pj_type(root) != PJ_OBJECT) return 1;
	if (!(pj_get(root, "run", &run) && pj_type(run) == PJ_OBJECT && pj_get(run, "iterations", &v)) &&
	    !pj_get(root, "iterations", &v))
		return 1;
	if (!pj_number(v, &d) || d < 0 || d > 9007199254740992.0 || d != (double)(unsigned long long)d) return 0;
	*n = (unsigned long long)d;
	return 1;
}

static int oracle(pgflow_bytes input, pgflow_bytes context) {
	unsigned long long n;
	if (!iterations(input, &n)) return pgflow_fail("oracle: iterations must be a non-negative integer");
	volatile unsigned long long done = 0;
	for (unsigned long long i = 0; i < n; i++) done++;
	static const char a[] = "{\"context\":", b[] = ",\"input\":", c[] = "}";
	size_t len = sizeof a - 1 + context.len + sizeof b - 1 + input.len + sizeof c - 1;
	char *out = malloc(len), *p = out;
	if (!out) return pgflow_fail("oracle: out of memory");
	memcpy(p, a, sizeof a - 1), p += sizeof a - 1;
	memcpy(p, context.data, context.len), p += context.len;
	memcpy(p, b, sizeof b - 1), p += sizeof b - 1;
	memcpy(p, input.data, input.len), p += input.len;
	memcpy(p, c, sizeof c - 1);
	return pgflow_output(out, len);
}

PGFLOW_HANDLER(oracle)
