/* sum: adds up the first array among the input object's values (or the input itself when it
 * is an array): {"run":[1,2,3]} -> {"sum":6}. Doubles, added left to right from 0. */
#include "pgflow.h"
#include "pgflow_json.h"

static int sum(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value root, numbers = {0}, item;
	const char *cursor = NULL;
	if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("sum: invalid JSON input");
	if (pj_type(root) == PJ_ARRAY) {
		numbers = root;
	} else {
		while (pj_next(root, &cursor, NULL, &item)) {
			if (pj_type(item) == PJ_ARRAY) {
				numbers = item;
				break;
			}
		}
	}
	if (numbers.p == NULL) return pgflow_fail("sum: input has no array of numbers");

	double total = 0;
	char msg[64];
	int i = 0;
	cursor = NULL;
	for (; pj_next(numbers, &cursor, NULL, &item); i++) {
		double x;
		if (pj_type(item) != PJ_NUMBER) {
			snprintf(msg, sizeof msg, "sum: element %d is not a number", i);
			return pgflow_fail(msg);
		}
		if (!pj_number(item, &x)) {
			snprintf(msg, sizeof msg, "sum: element %d is out of range", i);
			return pgflow_fail(msg);
		}
		total += x;
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
