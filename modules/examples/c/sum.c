/* sum: adds up every number in its input, at any depth, in document order, as doubles from 0:
 * [1,[2,{"x":3}],"a"] -> {"sum":6}. A step with dependencies gets {"run": <flow input>,
 * "<dep>": <its output>, ...}: when the input is an object with "run" and another member,
 * the flow input is left out and only the other members count
 * ({"run":[10],"a":[1,2]} -> {"sum":3}). */
#include "pgflow.h"
#include "pgflow_json.h"

/* Adds every number in v to *total. Returns 0 with *bad set to a number too large for a
 * double. */
static int add_numbers(pj_value v, double *total, pj_value *bad) {
	const char *cursor = NULL;
	pj_value number;
	double x;
	while (pj_next_number(v, &cursor, &number)) {
		if (!pj_number(number, &x)) return *bad = number, 0;
		*total += x;
	}
	return 1;
}

/* Whether root is a step input with dependencies: an object with "run" and another member. */
static int has_dependencies(pj_value root) {
	const char *cursor = NULL;
	pj_value key, item;
	int run = 0, other = 0;
	if (pj_type(root) != PJ_OBJECT) return 0;
	while (pj_next(root, &cursor, &key, &item)) {
		if (pj_string_equals(key, "run")) run = 1;
		else other = 1;
	}
	return run && other;
}

static int sum(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value root, key, item, bad;
	const char *cursor = NULL;
	double total = 0;
	int ok = 1;
	if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("sum: invalid JSON input");
	if (has_dependencies(root)) {
		while (ok && pj_next(root, &cursor, &key, &item))
			if (!pj_string_equals(key, "run")) ok = add_numbers(item, &total, &bad);
	} else {
		ok = add_numbers(root, &total, &bad);
	}
	if (!ok) {
		/* The number's text, shortened: a number out of range can have hundreds of digits. */
		char msg[96];
		int len = (int)(bad.end - bad.p);
		snprintf(msg, sizeof msg, "sum: number %.*s%s is out of range", len > 40 ? 40 : len, bad.p,
			 len > 40 ? "..." : "");
		return pgflow_fail(msg);
	}
	if (total != total || total > 1.7976931348623157e308 || total < -1.7976931348623157e308)
		return pgflow_fail("sum: the sum is not a finite number");

	pj_buf out = {0};
	pj_buf_puts(&out, "{\"sum\":");
	pj_buf_number(&out, total);
	pj_buf_puts(&out, "}");
	int status = out.failed ? pgflow_fail("sum: out of memory") : pgflow_output(out.data, out.len);
	pj_buf_free(&out);
	return status;
}

PGFLOW_HANDLER(sum)
