/* echo_map: a map step's handler that returns the element it received, unchanged. */
#include "pgflow.h"

static int echo_map(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	return pgflow_output(input.data, input.len);
}

PGFLOW_HANDLER(echo_map)
