/* fail: always fails with the message "always fails". */
#include "pgflow.h"

static int fail(pgflow_bytes input, pgflow_bytes context) {
	(void)input, (void)context;
	return pgflow_fail("always fails");
}

PGFLOW_HANDLER(fail)
