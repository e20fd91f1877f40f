/* spin: busy-loops forever, for timeout tests. The volatile counter keeps a real loop with a
 * back-edge in the module (where wazero checks for cancellation). */
#include "pgflow.h"

static int spin(pgflow_bytes input, pgflow_bytes context) {
	(void)input, (void)context;
	volatile unsigned long long n = 0;
	for (;;) n++;
	return PGFLOW_OK;
}

PGFLOW_HANDLER(spin)
