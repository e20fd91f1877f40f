// Memory bomb in C: doubles a buffer with realloc (touching every page) until malloc
// fails, then reports to stderr and aborts, like a careless handler would.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((export_name("pgflow_abi_version"))) int pgflow_abi_version(void) { return 1; }

__attribute__((export_name("pgflow_handle"))) int pgflow_handle(int input_len, int context_len) {
	(void)input_len;
	(void)context_len;
	size_t size = 1 << 16;
	char *buf = NULL;
	for (;;) {
		char *next = realloc(buf, size);
		if (!next) {
			fprintf(stderr, "out of memory at %zu bytes\n", size);
			abort();
		}
		buf = next;
		memset(buf, 1, size);
		size *= 2;
	}
}
