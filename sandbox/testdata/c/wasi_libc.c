// Reactor that tries files, environment, clocks, sockets and randomness through wasi-libc
// and reports what it got as JSON. Under the deny-all sandbox: no file opens, no
// environment, no sockets; run as a deterministic step's task: the fixed clock at 2022-01-01,
// a reproducible random stream.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

__attribute__((import_module("pgflow"), import_name("output_write")))
void output_write(const char *ptr, int len);

__attribute__((export_name("pgflow_abi_version"))) int pgflow_abi_version(void) { return 1; }

__attribute__((export_name("pgflow_handle"))) int pgflow_handle(int input_len, int context_len) {
	(void)input_len;
	(void)context_len;
	FILE *f = fopen("/etc/passwd", "r");
	int file_errno = f ? 0 : errno;
	FILE *w = fopen("/tmp/pgflow-wasm-sandbox-test", "w");
	const char *home = getenv("HOME");
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int sock = accept(3, NULL, NULL);
	int sock_errno = sock < 0 ? errno : 0;
	unsigned char rnd[4] = {0};
	getentropy(rnd, sizeof rnd);
	fprintf(stderr, "stderr is captured, not shown\n");
	char out[512];
	int n = snprintf(out, sizeof out,
		"{\"file_read\":%s,\"file_errno\":%d,\"file_write\":%s,\"env_home\":%s,"
		"\"year_2022\":%s,\"socket\":%s,\"socket_errno\":%d,\"random\":\"%02x%02x%02x%02x\"}",
		f ? "true" : "false", file_errno, w ? "true" : "false", home ? "true" : "false",
		(ts.tv_sec >= 1640995200 && ts.tv_sec < 1640995200 + 3600) ? "true" : "false",
		sock >= 0 ? "true" : "false", sock_errno, rnd[0], rnd[1], rnd[2], rnd[3]);
	output_write(out, n);
	return 0;
}
