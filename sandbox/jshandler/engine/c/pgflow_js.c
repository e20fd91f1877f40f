/*
 * pgflow_js.c: the pgflow ABI v1 reactor that runs a JavaScript handler in QuickJS-NG.
 *
 * sandbox/jshandler makes one module per handler out of this engine. It instantiates the
 * engine once, copies the prelude (sandbox/jshandler/prelude.js) and the handler's bundle
 * into buffers from pgflowjs_source, and calls pgflowjs_init(1): the runtime and the context
 * are created, both scripts are evaluated and the handler is kept. The resulting linear
 * memory becomes the data of a new module (a snapshot), so every task starts a fresh
 * instance that is already initialised, and pgflow_handle only calls the handler.
 * pgflowjs_init(0) leaves the initialisation to the first pgflow_handle instead: each fresh
 * instance then starts QuickJS itself (only used to measure what the snapshot saves).
 *
 * The prelude is a script whose value is a function install(natives): it puts the web
 * globals (console, fetch, crypto, timers...) on globalThis around the natives below, which
 * never become globals themselves, and returns the hooks this file calls: describe(error),
 * fireTimer(), and prepare(), which finds the bundle's handler and returns run(input, context).
 */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pgflow.h"
#include "pgflow_json.h"
#include "quickjs.h"

#define EXPORT(name) __attribute__((export_name(name)))

/* The bundle is evaluated as this file: stacks name it, and the host maps it back to the
 * sources with the bundle's source map. */
#define BUNDLE_NAME "handler.js"
#define PRELUDE_NAME "pgflow:prelude"
#define LOAD_FAILED "the handler module failed while loading: "
/* Bytes a task may allocate before the engine's first garbage collection. */
#define GC_HEADROOM (2 << 20)

static char *sources[2];
static size_t source_lens[2];
/* Whether a source is text or bytecode that pgflowjs_compile made (in another instance). */
static int is_bytecode[2];
static JSRuntime *rt;
static JSContext *ctx;
/* From the prelude: run(input, context) calls the handler; describe(error) formats a thrown
 * value for error_write; fireTimer() runs the next timer if it is due, or waits for a running
 * fetch until then (true), else returns the milliseconds until it is, false when none is left. */
static JSValue run_fn, describe_fn, timer_fn;
static int ready;
/* The context's flow_input value during a task, parsed only when the handler reads
 * ctx.flowInput (flow_input()): a map task's context can carry a run input of 64 KiB. */
static const char *flow_input_p;
static size_t flow_input_len;

/* Reserves n bytes for source which (0 prelude, 1 bundle); the host writes them there. */
EXPORT("pgflowjs_source") char *pgflowjs_source(int which, size_t n) {
	if (which < 0 || which > 3) return NULL;
	is_bytecode[which & 1] = which >> 1;
	which &= 1;
	free(sources[which]);
	sources[which] = malloc(n + 1);
	if (sources[which] == NULL) return NULL;
	sources[which][n] = '\0';
	source_lens[which] = n;
	return sources[which];
}

/* ---- errors ------------------------------------------------------------------------- */

/* Fails the task with a thrown value: the prelude's describe() gives pgflow's own worker's
 * message (an Error's message, a string as is, anything else as JSON) and the stack. */
static int fail_value(JSContext *c, JSValue exc, const char *what) {
	const char *text = NULL;
	size_t len = 0;
	if (JS_IsFunction(c, describe_fn)) {
		JSValue d = JS_Call(c, describe_fn, JS_UNDEFINED, 1, &exc);
		if (!JS_IsException(d)) text = JS_ToCStringLen(c, &len, d);
		else JS_FreeValue(c, JS_GetException(c));
		JS_FreeValue(c, d);
	}
	if (text == NULL) text = JS_ToCStringLen(c, &len, exc);
	JS_FreeValue(c, exc);
	size_t wlen = strlen(what);
	char *buf = malloc(wlen + len + 1);
	int status;
	if (buf == NULL || text == NULL) {
		status = pgflow_fail(text ? text : "the handler failed, and describing the error ran out of memory");
	} else {
		memcpy(buf, what, wlen);
		memcpy(buf + wlen, text, len);
		status = pgflow_fail_n(buf, wlen + len);
	}
	free(buf);
	if (text) JS_FreeCString(c, text);
	return status;
}

static int fail_exception(JSContext *c, const char *what) { return fail_value(c, JS_GetException(c), what); }

/* ---- natives for the prelude ---------------------------------------------------------- */

/* log(level, text) */
static JSValue js_log(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	int32_t level = PGFLOW_LOG_INFO;
	if (argc < 2 || JS_ToInt32(c, &level, argv[0])) return JS_EXCEPTION;
	size_t len;
	const char *s = JS_ToCStringLen(c, &len, argv[1]);
	if (s == NULL) return JS_EXCEPTION;
	pgflow_host_log(level, s, len);
	JS_FreeCString(c, s);
	return JS_UNDEFINED;
}

/* random(n): a Uint8Array of n bytes from WASI random_get, which the sandbox keys per task,
 * so nothing random is frozen into the snapshot (QuickJS's own Math.random state would be). */
static JSValue js_random(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	uint32_t n = 0;
	if (argc < 1 || JS_ToUint32(c, &n, argv[0])) return JS_EXCEPTION;
	if (n > 65536) return JS_ThrowRangeError(c, "at most 65536 random bytes at once");
	uint8_t buf[256];
	uint8_t *p = n <= sizeof buf ? buf : malloc(n);
	if (p == NULL) return JS_ThrowOutOfMemory(c);
	/* getentropy takes at most 256 bytes per call. */
	for (uint32_t done = 0; done < n; done += 256) {
		uint32_t k = n - done < 256 ? n - done : 256;
		if (getentropy(p + done, k) != 0) {
			if (p != buf) free(p);
			return JS_ThrowInternalError(c, "random_get failed");
		}
	}
	JSValue r = JS_NewUint8ArrayCopy(c, p, n);
	if (p != buf) free(p);
	return r;
}

/* The host's message for the last refused capability call, as a JS string. */
static JSValue last_error_string(JSContext *c) {
	char *msg = pgflow_last_error();
	JSValue s = JS_NewString(c, msg ? msg : "");
	free(msg);
	return s;
}

/* host_refusal is what a host call that refused or failed answers the prelude: {code,
 * message}, the error code and the host's last error (the prelude throws it). */
static JSValue host_refusal(JSContext *c, int rc) {
	JSValue r = JS_NewObject(c);
	JS_SetPropertyStr(c, r, "code", JS_NewInt32(c, rc));
	JS_SetPropertyStr(c, r, "message", last_error_string(c));
	return r;
}

/* A request runs in the background on the host (http_start), so the prelude can fire its
 * timers while it waits and stop it when an AbortSignal fires (http_wait with cancel). */
PGFLOW_IMPORT_("http_start") int pgflow_host_http_start(const void *method, size_t method_len, const void *url, size_t url_len,
                                                        const void *headers, size_t headers_len, const void *body, size_t body_len,
                                                        int wait_ms);
PGFLOW_IMPORT_("http_wait") int pgflow_host_http_wait(int wait_ms, int cancel);

/* What http_start or http_wait answered: null while the request runs, {status, headers, body:
 * Uint8Array} once its response is in, or {code, message} when the host refused it or it
 * failed (the prelude throws). */
static JSValue http_answer(JSContext *c, int rc) {
	if (rc == 0) return JS_NULL;
	if (rc < 0) return host_refusal(c, rc);
	size_t hlen, blen;
	char *headers = pgflow_response_part_(0, &hlen);
	char *body = headers ? pgflow_response_part_(1, &blen) : NULL;
	JSValue ret;
	if (body == NULL) {
		ret = JS_ThrowOutOfMemory(c);
	} else {
		ret = JS_NewObject(c);
		JS_SetPropertyStr(c, ret, "status", JS_NewInt32(c, rc));
		JS_SetPropertyStr(c, ret, "headers", JS_NewStringLen(c, headers, hlen));
		JS_SetPropertyStr(c, ret, "body", JS_NewUint8ArrayCopy(c, (const uint8_t *)body, blen));
	}
	free(headers);
	free(body);
	return ret;
}

/* http(method, url, headerLines, body, waitMs) starts a request and waits at most waitMs for
 * it (negative: until it ends); body is a string or a Uint8Array. Answers as http_answer. */
static JSValue js_http(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	if (argc < 5) return JS_ThrowTypeError(c, "http needs 5 arguments");
	int32_t wait_ms;
	if (JS_ToInt32(c, &wait_ms, argv[4])) return JS_EXCEPTION;
	const char *method = JS_ToCString(c, argv[0]);
	const char *url = JS_ToCString(c, argv[1]);
	const char *headers = JS_ToCString(c, argv[2]);
	const char *body_str = NULL;
	const uint8_t *body = NULL;
	size_t body_len = 0;
	if (JS_IsString(argv[3])) {
		body_str = JS_ToCStringLen(c, &body_len, argv[3]);
		body = (const uint8_t *)body_str;
	} else if (!JS_IsUndefined(argv[3]) && !JS_IsNull(argv[3])) {
		body = JS_GetUint8Array(c, &body_len, argv[3]);
	}
	JSValue ret = JS_EXCEPTION;
	if (method && url && headers && (body || body_len == 0) && !JS_HasException(c)) {
		int rc = pgflow_host_http_start(method, strlen(method), url, strlen(url), headers, strlen(headers), body, body_len, wait_ms);
		ret = http_answer(c, rc);
	}
	JS_FreeCString(c, method);
	JS_FreeCString(c, url);
	JS_FreeCString(c, headers);
	JS_FreeCString(c, body_str);
	return ret;
}

/* http_wait(waitMs, cancel) waits at most waitMs more for the running request, or, when
 * cancel is true, stops it (its answer is then {code: canceled}). Answers as http_answer. */
static JSValue js_http_wait(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	int32_t wait_ms;
	if (argc < 2 || JS_ToInt32(c, &wait_ms, argv[0])) return JS_ThrowTypeError(c, "http_wait needs 2 arguments");
	return http_answer(c, pgflow_host_http_wait(wait_ms, JS_ToBool(c, argv[1])));
}

/* take_string makes a JS string of text, an answer of the host read into memory of malloc,
 * and frees it. */
static JSValue take_string(JSContext *c, char *text, size_t len) {
	JSValue s = JS_NewStringLen(c, text, len);
	free(text);
	return s;
}

/* config(name) -> the value, or {code, message} when refused or not set. */
static JSValue js_config(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	if (argc < 1) return JS_ThrowTypeError(c, "config needs a name");
	const char *name = JS_ToCString(c, argv[0]);
	if (name == NULL) return JS_EXCEPTION;
	char *value;
	size_t len;
	int rc = pgflow_config(name, &value, &len);
	JS_FreeCString(c, name);
	if (rc < 0) return host_refusal(c, rc);
	return take_string(c, value, len);
}

/* sql(request JSON) -> the result JSON text, or {code, message} when the host refused the
 * statement or PostgreSQL raised an error (the prelude throws). */
static JSValue js_sql(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	if (argc < 1) return JS_ThrowTypeError(c, "sql needs a request");
	size_t len;
	const char *req = JS_ToCStringLen(c, &len, argv[0]);
	if (req == NULL) return JS_EXCEPTION;
	char *result;
	size_t rlen;
	int rc = pgflow_sql(req, len, &result, &rlen);
	JS_FreeCString(c, req);
	if (rc < 0) return host_refusal(c, rc);
	return take_string(c, result, rlen);
}

/* utf8_decode(Uint8Array) -> string; utf8_encode(string) -> Uint8Array. */
static JSValue js_utf8_decode(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	size_t len;
	uint8_t *p = argc < 1 ? NULL : JS_GetUint8Array(c, &len, argv[0]);
	if (p == NULL) return JS_EXCEPTION;
	return JS_NewStringLen(c, (const char *)p, len);
}

static JSValue js_utf8_encode(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	size_t len;
	const char *s = argc < 1 ? NULL : JS_ToCStringLen(c, &len, argv[0]);
	if (s == NULL) return JS_EXCEPTION;
	JSValue r = JS_NewUint8ArrayCopy(c, (const uint8_t *)s, len);
	JS_FreeCString(c, s);
	return r;
}

/* flow_input() -> the task context's flow_input, parsed (null outside a task). */
static JSValue js_flow_input(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val, (void)argc, (void)argv;
	if (flow_input_p == NULL) return JS_NULL;
	/* JS_ParseJSON reads a NUL-terminated text. */
	char *text = malloc(flow_input_len + 1);
	if (text == NULL) return JS_ThrowOutOfMemory(c);
	memcpy(text, flow_input_p, flow_input_len);
	text[flow_input_len] = '\0';
	JSValue v = JS_ParseJSON(c, text, flow_input_len, "<flow_input>");
	free(text);
	return v;
}

/* compute_call(request JSON) -> the host's answer JSON, or {code, message} (the host names the
 * DOMException in the message: "DataError: ..."). The host computes with Go's crypto and
 * touches neither files nor the network (sandbox/compute). */
PGFLOW_IMPORT_("compute_call") int pgflow_host_compute_call(const void *request, size_t request_len);
PGFLOW_IMPORT_("compute_result_read") int pgflow_host_compute_result_read(void *ptr, size_t cap);

static JSValue js_compute_call(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
	(void)this_val;
	if (argc < 1) return JS_ThrowTypeError(c, "compute_call needs a request");
	size_t len;
	const char *req = JS_ToCStringLen(c, &len, argv[0]);
	if (req == NULL) return JS_EXCEPTION;
	int n = pgflow_host_compute_call(req, len);
	JS_FreeCString(c, req);
	if (n < 0) return host_refusal(c, n);
	char *buf = malloc((size_t)n + 1);
	if (buf == NULL) return JS_ThrowOutOfMemory(c);
	if (n > 0) pgflow_host_compute_result_read(buf, (size_t)n);
	return take_string(c, buf, (size_t)n);
}

/* ---- initialisation ------------------------------------------------------------------- */

static JSValue get_fn(JSContext *c, JSValueConst obj, const char *name) {
	JSValue f = JS_GetPropertyStr(c, obj, name);
	if (!JS_IsFunction(c, f)) {
		JS_FreeValue(c, f);
		return JS_ThrowTypeError(c, "prelude: %s is not a function", name);
	}
	return f;
}

/* Evaluates source which (0 the prelude, 1 the bundle): bytecode from pgflowjs_compile, or
 * text, parsed here. */
static JSValue eval_source(int which) {
	if (!is_bytecode[which])
		return JS_Eval(ctx, sources[which], source_lens[which], which ? BUNDLE_NAME : PRELUDE_NAME, JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_STRICT);
	JSValue fn = JS_ReadObject(ctx, (const uint8_t *)sources[which], source_lens[which], JS_READ_OBJ_BYTECODE);
	if (JS_IsException(fn)) return fn;
	return JS_EvalFunction(ctx, fn);
}

/* Compiling a script takes several times its size in memory for a moment, and a snapshot
 * keeps the memory its engine ever grew to: every task's instance would get it, to clear and
 * to copy. So the host compiles the prelude and the bundle in a throwaway instance
 * (pgflowjs_compile) and hands the bytecode to the one it snapshots. The prelude is written
 * without the source text QuickJS keeps for every function (for toString; each nested
 * function keeps its own copy, several times the prelude's size): its functions print as
 * native ones, as a browser's do. The bundle keeps its text: a handler's code may read it. */
static uint8_t *compiled;
static size_t compiled_len;

/* Compiles source which; returns the bytecode's length (pgflowjs_compiled is where it is), or
 * -1 with the error written (a syntax error). */
EXPORT("pgflowjs_compile") int pgflowjs_compile(int which) {
	if (which < 0 || which > 1 || sources[which] == NULL) {
		pgflow_fail("pgflowjs_compile: no such source");
		return -1;
	}
	if (rt == NULL) {
		rt = JS_NewRuntime();
		ctx = rt ? JS_NewContext(rt) : NULL;
		if (ctx == NULL) {
			pgflow_fail("cannot start the JavaScript runtime: out of memory");
			return -1;
		}
	}
	JSValue fn = JS_Eval(ctx, sources[which], source_lens[which], which ? BUNDLE_NAME : PRELUDE_NAME,
	                     JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_STRICT | JS_EVAL_FLAG_COMPILE_ONLY);
	if (JS_IsException(fn)) {
		fail_exception(ctx, which ? LOAD_FAILED : "the prelude failed: ");
		return -1;
	}
	if (compiled) js_free(ctx, compiled);
	compiled = JS_WriteObject(ctx, &compiled_len, fn, JS_WRITE_OBJ_BYTECODE | (which ? 0 : JS_WRITE_OBJ_STRIP_SOURCE));
	JS_FreeValue(ctx, fn);
	if (compiled == NULL) {
		pgflow_fail("compiling the script ran out of memory");
		return -1;
	}
	return (int)compiled_len;
}

EXPORT("pgflowjs_compiled") uint8_t *pgflowjs_compiled(void) { return compiled; }

/* While the engine initialises, what it frees is zeroed first: freed memory keeps its bytes,
 * and the snapshot stores every non-zero byte, so the garbage of parsing the prelude and the
 * bundle would otherwise be copied into every task's instance. Tasks free as usual. */
static int zero_frees;
/* Called through a volatile pointer: a memset just before free is otherwise optimised away. */
static void *(*volatile zero_memory)(void *, int, size_t) = memset;

static void *m_calloc(void *opaque, size_t count, size_t size) { (void)opaque; return calloc(count, size); }
static void *m_malloc(void *opaque, size_t size) { (void)opaque; return malloc(size); }
static void m_free(void *opaque, void *ptr) {
	(void)opaque;
	if (zero_frees && ptr != NULL) zero_memory(ptr, 0, malloc_usable_size(ptr));
	free(ptr);
}
static void *m_realloc(void *opaque, void *ptr, size_t size) {
	(void)opaque;
	if (!zero_frees || ptr == NULL || size == 0) {
		if (size == 0 && ptr != NULL) {
			m_free(opaque, ptr);
			return NULL;
		}
		return realloc(ptr, size);
	}
	size_t old = malloc_usable_size(ptr);
	if (size <= old) return ptr;
	void *p = malloc(size);
	if (p == NULL) return NULL;
	memcpy(p, ptr, old);
	m_free(opaque, ptr);
	return p;
}
static size_t m_usable_size(const void *ptr) { return malloc_usable_size((void *)ptr); }
static const JSMallocFunctions malloc_funcs = {m_calloc, m_malloc, m_free, m_realloc, m_usable_size};

static int init(void) {
	if (sources[0] == NULL || sources[1] == NULL) return pgflow_fail("pgflowjs_init: the prelude or the bundle is missing");
	zero_frees = 1;
	rt = JS_NewRuntime2(&malloc_funcs, NULL);
	if (rt == NULL) return pgflow_fail("cannot start the JavaScript runtime: out of memory");
	ctx = JS_NewContext(rt);
	if (ctx == NULL) return pgflow_fail("cannot create the JavaScript context: out of memory");

	JSValue install = eval_source(0);
	if (JS_IsException(install)) return fail_exception(ctx, "the prelude failed: ");
	JSValue natives = JS_NewObject(ctx);
	JS_SetPropertyStr(ctx, natives, "log", JS_NewCFunction(ctx, js_log, "log", 2));
	JS_SetPropertyStr(ctx, natives, "random", JS_NewCFunction(ctx, js_random, "random", 1));
	JS_SetPropertyStr(ctx, natives, "http", JS_NewCFunction(ctx, js_http, "http", 5));
	JS_SetPropertyStr(ctx, natives, "http_wait", JS_NewCFunction(ctx, js_http_wait, "http_wait", 2));
	JS_SetPropertyStr(ctx, natives, "config", JS_NewCFunction(ctx, js_config, "config", 1));
	JS_SetPropertyStr(ctx, natives, "sql", JS_NewCFunction(ctx, js_sql, "sql", 1));
	JS_SetPropertyStr(ctx, natives, "utf8_decode", JS_NewCFunction(ctx, js_utf8_decode, "utf8_decode", 1));
	JS_SetPropertyStr(ctx, natives, "utf8_encode", JS_NewCFunction(ctx, js_utf8_encode, "utf8_encode", 1));
	JS_SetPropertyStr(ctx, natives, "flow_input", JS_NewCFunction(ctx, js_flow_input, "flow_input", 0));
	JS_SetPropertyStr(ctx, natives, "compute_call", JS_NewCFunction(ctx, js_compute_call, "compute_call", 1));
	JSValue hooks = JS_Call(ctx, install, JS_UNDEFINED, 1, &natives);
	JS_FreeValue(ctx, install);
	JS_FreeValue(ctx, natives);
	if (JS_IsException(hooks)) return fail_exception(ctx, "the prelude failed: ");
	describe_fn = get_fn(ctx, hooks, "describe");
	timer_fn = get_fn(ctx, hooks, "fireTimer");
	JSValue prepare = get_fn(ctx, hooks, "prepare");
	JS_FreeValue(ctx, hooks);
	if (JS_IsException(describe_fn) || JS_IsException(timer_fn) || JS_IsException(prepare)) return fail_exception(ctx, "the prelude failed: ");

	/* The bundle is an ES module turned into a script: strict, like the module it was. */
	JSValue r = eval_source(1);
	if (JS_IsException(r)) {
		JS_FreeValue(ctx, prepare);
		return fail_exception(ctx, LOAD_FAILED);
	}
	JS_FreeValue(ctx, r);
	/* Promise jobs the top-level code queued run now, not at the start of every task. */
	for (;;) {
		JSContext *jc;
		int n = JS_ExecutePendingJob(rt, &jc);
		if (n == 0) break;
		if (n < 0) {
			JS_FreeValue(ctx, prepare);
			return fail_exception(jc, LOAD_FAILED);
		}
	}
	run_fn = JS_Call(ctx, prepare, JS_UNDEFINED, 0, NULL);
	JS_FreeValue(ctx, prepare);
	if (JS_IsException(run_fn)) return fail_exception(ctx, LOAD_FAILED);
	/* The sources are evaluated: their text need not be in every task's memory. Zeroed
	 * first, as freed memory keeps its bytes and the snapshot stores every non-zero byte. */
	for (int i = 0; i < 2; i++) {
		zero_memory(sources[i], 0, source_lens[i]);
		free(sources[i]);
		sources[i] = NULL;
	}
	/* Collect what initialising left over, then leave each task room before the next
	 * collection: a task's instance is thrown away with its garbage, and a snapshot taken
	 * just under the threshold made every task pay a full collection of the engine's heap. */
	JS_RunGC(rt);
	zero_frees = 0;
	JSMemoryUsage usage;
	JS_ComputeMemoryUsage(rt, &usage);
	JS_SetGCThreshold(rt, (size_t)usage.malloc_size + GC_HEADROOM);
	ready = 1;
	return PGFLOW_OK;
}

/* eager 1: initialise now (before the snapshot); 0: at the first task. */
EXPORT("pgflowjs_init") int pgflowjs_init(int eager) { return eager ? init() : PGFLOW_OK; }

/* ---- one task ------------------------------------------------------------------------- */

/* Runs the job queue (and, when it is empty, due timers) until promise settles. */
static int settle(JSValue promise) {
	for (;;) {
		if (JS_PromiseState(ctx, promise) != JS_PROMISE_PENDING) return PGFLOW_OK;
		JSContext *jc;
		int r = JS_ExecutePendingJob(rt, &jc);
		if (r < 0) return fail_exception(jc, "");
		if (r > 0) continue;
		JSValue fired = JS_Call(ctx, timer_fn, JS_UNDEFINED, 0, NULL);
		if (JS_IsException(fired)) return fail_exception(ctx, "");
		if (JS_IsNumber(fired)) {
			/* The next timer is due in that many milliseconds: sleep (WASI poll_oneoff, on
			 * the sandbox's clock) and look again. */
			double ms = 0;
			JS_ToFloat64(ctx, &ms, fired);
			JS_FreeValue(ctx, fired);
			if (ms > 0) {
				long long ns = ms > 2147483647.0 ? 2147483647000000LL : (long long)(ms * 1e6) + 1;
				struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		int more = JS_ToBool(ctx, fired);
		JS_FreeValue(ctx, fired);
		if (!more)
			return pgflow_fail("the handler's promise never settled: it waits for something that cannot happen "
			                   "here (no timer is left and nothing else can resolve it)");
	}
}

/* skip_value returns the end of the JSON value at p, or NULL. It does not validate (the
 * context is JSON: the parse that follows checks what remains): finding the flow input's end
 * this way costs a fraction of a full parse, which a map task would pay for every element. */
static const char *skip_value(const char *p, const char *end) {
	int depth = 0;
	do {
		if (p >= end) return NULL;
		switch (*p) {
		case '"':
			for (p++;; p++) {
				p = memchr(p, '"', (size_t)(end - p));
				if (p == NULL) return NULL;
				const char *q = p;
				while (q[-1] == '\\') q--;
				if ((p - q) % 2 == 0) break; /* not escaped */
			}
			p++;
			break;
		case '[':
		case '{':
			depth++, p++;
			break;
		case ']':
		case '}':
			depth--, p++;
			break;
		default:
			if (depth == 0) { /* a number or a literal */
				while (p < end && !strchr(",}] \t\r\n", *p)) p++;
				return p;
			}
			p++;
		}
	} while (depth > 0);
	return p;
}

/* find_flow_input finds the value of the context object's top-level member "flow_input". */
static int find_flow_input(const char *p, const char *end, pj_value *out) {
	static const char key[] = "\"flow_input\"";
	p = pj_ws_(p, end);
	if (p >= end || *p != '{') return 0;
	for (p++;;) {
		p = pj_ws_(p, end);
		if (p >= end || *p != '"') return 0;
		const char *k = p;
		if ((p = skip_value(p, end)) == NULL) return 0;
		int match = (size_t)(p - k) == sizeof key - 1 && memcmp(k, key, sizeof key - 1) == 0;
		p = pj_ws_(p, end);
		if (p >= end || *p != ':') return 0;
		p = pj_ws_(p + 1, end);
		const char *v = p;
		if ((p = skip_value(p, end)) == NULL) return 0;
		if (match) {
			out->p = v, out->end = p;
			return 1;
		}
		p = pj_ws_(p, end);
		if (p >= end || *p != ',') return 0;
		p++;
	}
}

/* Parses the context with null for its flow_input, whose text flow_input() parses when asked. */
static JSValue parse_context(pgflow_bytes context) {
	pj_value fi;
	if (!find_flow_input(context.data, context.data + context.len, &fi))
		return JS_ParseJSON(ctx, context.data, context.len, "<context>");
	size_t before = (size_t)(fi.p - context.data), after = (size_t)(context.data + context.len - fi.end);
	char *rest = malloc(before + 4 + after + 1);
	if (rest == NULL) return JS_ThrowOutOfMemory(ctx);
	memcpy(rest, context.data, before);
	memcpy(rest + before, "null", 4);
	memcpy(rest + before + 4, fi.end, after);
	rest[before + 4 + after] = '\0'; /* JS_ParseJSON reads a NUL-terminated text */
	JSValue v = JS_ParseJSON(ctx, rest, before + 4 + after, "<context>");
	free(rest);
	flow_input_p = fi.p;
	flow_input_len = (size_t)(fi.end - fi.p);
	return v;
}

static int run_task(pgflow_bytes input, pgflow_bytes context);

static int handle(pgflow_bytes input, pgflow_bytes context) {
	if (!ready && init() != PGFLOW_OK) return PGFLOW_ERROR;
	int status = run_task(input, context);
	flow_input_p = NULL; /* the context's memory is the task's */
	return status;
}

static int run_task(pgflow_bytes input, pgflow_bytes context) {
	JSValue args[2];
	args[0] = JS_ParseJSON(ctx, input.data, input.len, "<input>");
	if (JS_IsException(args[0])) return fail_exception(ctx, "the task input is not JSON: ");
	args[1] = parse_context(context);
	if (JS_IsException(args[1])) {
		JS_FreeValue(ctx, args[0]);
		return fail_exception(ctx, "the task context is not JSON: ");
	}
	JSValue ret = JS_Call(ctx, run_fn, JS_UNDEFINED, 2, args);
	JS_FreeValue(ctx, args[0]);
	JS_FreeValue(ctx, args[1]);
	if (JS_IsException(ret)) return fail_exception(ctx, "");

	/* run returns a promise of the output's JSON text. A fetch's request runs on the host
	 * while the job queue drains; the prelude's fireTimer then waits for it (settle). */
	if (settle(ret) != PGFLOW_OK) {
		JS_FreeValue(ctx, ret);
		return PGFLOW_ERROR;
	}
	JSPromiseStateEnum st = JS_PromiseState(ctx, ret);
	JSValue v = JS_PromiseResult(ctx, ret);
	JS_FreeValue(ctx, ret);
	if (st == JS_PROMISE_REJECTED) return fail_value(ctx, v, "");
	size_t len;
	const char *s = JS_ToCStringLen(ctx, &len, v);
	JS_FreeValue(ctx, v);
	if (s == NULL) return fail_exception(ctx, "");
	pgflow_output(s, len);
	JS_FreeCString(ctx, s);
	return PGFLOW_OK;
}

PGFLOW_HANDLER(handle)
