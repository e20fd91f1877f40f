// Command-mode handler: reads the {"input":...,"context":...} envelope from stdin and
// prints {"stdin_bytes":N} to stdout, or fails with exit code 2 when stdin is empty.
#include <stdio.h>

int main(void) {
	char buf[4096];
	size_t total = 0, n;
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) total += n;
	if (total == 0) {
		fprintf(stderr, "no envelope on stdin\n");
		return 2;
	}
	printf("{\"stdin_bytes\":%zu}\n", total);
	return 0;
}
