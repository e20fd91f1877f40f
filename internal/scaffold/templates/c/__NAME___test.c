/* Unit tests of __NAME__.c, built natively (make test): pgflow_testhost.h calls the
 * handler's pgflow_handle as the worker does and records what it hands back. */
#include "pgflow_testhost.h"

static const char *ctx(void) { return pgflow_test_context("__NAME__", "__NAME__"); }

static void greets_by_name(void) {
	pgflow_test_result r;
	pgflow_test_call("{\"run\": {\"name\": \"Ada\"}}", ctx(), &r);
	PGFLOW_EXPECT(r.status == PGFLOW_OK);
	PGFLOW_EXPECT(r.output != NULL && strcmp(r.output, "{\"greeting\":\"Hello, Ada!\"}") == 0);
	PGFLOW_EXPECT(strcmp(r.logs, "info greeting Ada, attempt 1\n") == 0);
	pgflow_test_free(&r);
}

static void fails_without_a_name(void) {
	pgflow_test_result r;
	pgflow_test_call("{\"run\": {}}", ctx(), &r);
	PGFLOW_EXPECT(r.status == PGFLOW_ERROR && r.output == NULL);
	PGFLOW_EXPECT(r.error != NULL && strcmp(r.error, "__NAME__: input.run.name must be a string, e.g. {\"name\": \"Ada\"}") == 0);
	pgflow_test_free(&r);
}

int main(void) {
	greets_by_name();
	fails_without_a_name();
	return pgflow_test_summary();
}
