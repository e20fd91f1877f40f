// A C handler that prints to stdout with printf, then aborts: the line reaches the task's
// error message (wasi-libc flushes stdout at each newline, since fd 1 is a character device).
#include <stdio.h>
#include <stdlib.h>

__attribute__((export_name("pgflow_abi_version"))) int pgflow_abi_version(void) { return 1; }

__attribute__((export_name("pgflow_handle"))) int pgflow_handle(int input_len, int context_len) {
	printf("about to abort: input of %d bytes\n", input_len);
	(void)context_len;
	abort();
}
