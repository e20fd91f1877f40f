/* Native test of pgflow_testhost.h: a handler that uses every ABI call, called through
 * pgflow_handle as the worker calls it. Built and run by `make examples-test`. */
#include "pgflow_testhost.h"

static int handler(pgflow_bytes input, pgflow_bytes context) {
	pgflow_log(PGFLOW_LOG_INFO, "starting");
	if (input.len == 0) return pgflow_fail("empty input");
	if (strcmp(input.data, "\"sql\"") == 0) {
		const char *req = "{\"sql\":\"select $1::int as n\",\"params\":[7]}";
		char *result;
		if (pgflow_sql(req, strlen(req), &result, NULL) != 0) return pgflow_fail(pgflow_last_error());
		const char *bad = "{\"sql\":\"set role postgres\"}";
		char *none;
		int refused = pgflow_sql(bad, strlen(bad), &none, NULL);
		char *why = pgflow_last_error();
		char out[512];
		snprintf(out, sizeof out, "{\"result\":%s,\"refused\":%d,\"why\":\"%s\",\"null\":%d}", result, refused, why, none == NULL);
		free(result), free(why);
		return pgflow_output_str(out);
	}
	if (strcmp(input.data, "\"caps\"") != 0) {
		/* echo the input, then one byte of the context */
		char out[256];
		snprintf(out, sizeof out, "[%s,%zu]", input.data, context.len);
		return pgflow_output_str(out);
	}
	char *token;
	if (pgflow_config("TOKEN", &token, NULL) != 0) return pgflow_fail(pgflow_last_error());
	char *other;
	int denied = pgflow_config("OTHER", &other, NULL);
	pgflow_http_response resp;
	int rc = pgflow_http("POST", "https://api.example/", "Authorization: t\n", "x", 1, &resp);
	if (rc != 0) return pgflow_fail(pgflow_last_error());
	pgflow_http_response refused;
	int rc2 = pgflow_http("GET", "https://refused.example/", NULL, NULL, 0, &refused);
	char *why = pgflow_last_error();
	char out[512];
	snprintf(out, sizeof out, "{\"token\":\"%s\",\"denied\":%d,\"status\":%d,\"headers\":\"%.*s\",\"body\":\"%s\",\"refused\":%d,\"why\":\"%s\"}",
	         token, denied, resp.status, (int)resp.headers_len - 1, resp.headers, resp.body, rc2, why);
	free(token), free(why), pgflow_http_free(&resp);
	return pgflow_output_str(out);
}
PGFLOW_HANDLER(handler)

static void responder(const char *method, const char *url, const char *headers, const char *body, size_t body_len,
                      pgflow_test_reply *reply) {
	(void)headers, (void)body, (void)body_len;
	if (strstr(url, "refused")) {
		reply->error = PGFLOW_E_HOST_NOT_ALLOWED, reply->message = "not in http.allow";
		return;
	}
	reply->status = strcmp(method, "POST") == 0 ? 201 : 200;
	reply->headers = "Content-Type: text/plain\n";
	reply->body = "ok", reply->body_len = 2;
}

static const char *sql_seen;

static void sql_responder(const char *request, pgflow_test_sql_reply *reply) {
	static char seen[256];
	snprintf(seen, sizeof seen, "%s", request);
	sql_seen = seen;
	if (strstr(request, "set role")) {
		reply->error = PGFLOW_E_SQL_REFUSED, reply->message = "SET statements are not allowed";
		return;
	}
	reply->result = "{\"columns\":[\"n\"],\"rows\":[[7]],\"row_count\":1,\"command\":\"SELECT 1\"}";
}

int main(void) {
	pgflow_test_result r;
	pgflow_test_call("{\"a\":1}", pgflow_test_context("f", "s"), &r);
	PGFLOW_EXPECT(r.status == PGFLOW_OK && r.error == NULL);
	PGFLOW_EXPECT(r.output != NULL && strncmp(r.output, "[{\"a\":1},", 9) == 0);
	PGFLOW_EXPECT(strcmp(r.logs, "info starting\n") == 0);
	pgflow_test_free(&r);

	pgflow_test_call("", "{}", &r);
	PGFLOW_EXPECT(r.status == PGFLOW_ERROR && r.output == NULL && strcmp(r.error, "empty input") == 0);
	pgflow_test_free(&r);

	pgflow_test_call("\"caps\"", "{}", &r);
	PGFLOW_EXPECT(r.status == PGFLOW_ERROR && r.error != NULL && strstr(r.error, "not granted") != NULL);
	pgflow_test_free(&r);

	pgflow_test_grant_config("TOKEN", "t0k");
	pgflow_test_grant_http(responder);
	pgflow_test_call("\"caps\"", "{}", &r);
	PGFLOW_EXPECT(r.status == PGFLOW_OK);
	PGFLOW_EXPECT(r.output != NULL && strcmp(r.output, "{\"token\":\"t0k\",\"denied\":-1,\"status\":201,\"headers\":"
	                                                    "\"Content-Type: text/plain\",\"body\":\"ok\",\"refused\":-2,"
	                                                    "\"why\":\"not in http.allow\"}") == 0);
	if (r.output) printf("%s\n", r.output);
	pgflow_test_free(&r);

	pgflow_test_call("\"sql\"", "{}", &r);
	PGFLOW_EXPECT(r.status == PGFLOW_ERROR && r.error != NULL && strstr(r.error, "SQL is denied") != NULL);
	pgflow_test_free(&r);
	pgflow_test_grant_sql(sql_responder);
	pgflow_test_call("\"sql\"", "{}", &r);
	PGFLOW_EXPECT(r.status == PGFLOW_OK);
	PGFLOW_EXPECT(r.output != NULL && strcmp(r.output, "{\"result\":{\"columns\":[\"n\"],\"rows\":[[7]],\"row_count\":1,"
	                                                    "\"command\":\"SELECT 1\"},\"refused\":-11,\"why\":\"SET statements "
	                                                    "are not allowed\",\"null\":1}") == 0);
	PGFLOW_EXPECT(sql_seen != NULL && strcmp(sql_seen, "{\"sql\":\"set role postgres\"}") == 0);
	if (r.output) printf("%s\n", r.output);
	pgflow_test_free(&r);
	return pgflow_test_summary();
}
