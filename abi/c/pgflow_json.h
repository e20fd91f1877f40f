/*
 * pgflow_json.h: a small JSON scanner and writer for pgflow-wasm handlers in C (header-only).
 *
 * pj_parse validates a whole document (RFC 8259, UTF-8, nesting up to PJ_MAX_DEPTH) and
 * gives its root as a pj_value: the text of one value. Values are never copied: pj_get,
 * pj_next, pj_next_number and pj_type look inside the text, so a value's exact JSON text is
 * always at hand (v.p .. v.end). pj_buf builds output JSON in the canonical form the
 * examples share: no spaces, strings escaped as RFC 8785 does, numbers as ECMAScript
 * prints them.
 *
 *     pj_value root, run, name;
 *     if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("invalid JSON input");
 *     if (pj_get(root, "run", &run) && pj_get(run, "name", &name) && pj_type(name) == PJ_STRING) ...
 */
#ifndef PGFLOW_JSON_H
#define PGFLOW_JSON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PJ_MAX_DEPTH 512

/* One JSON value: the text from p up to (not including) end. */
typedef struct {
	const char *p;
	const char *end;
} pj_value;

enum { PJ_INVALID, PJ_NULL, PJ_FALSE, PJ_TRUE, PJ_NUMBER, PJ_STRING, PJ_ARRAY, PJ_OBJECT };

static inline const char *pj_ws_(const char *p, const char *end) {
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
	return p;
}

static inline int pj_hex_(int c) {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* Length of the valid UTF-8 sequence at p (2 to 4 bytes, first byte >= 0x80), or 0. */
static inline size_t pj_utf8_seq_(const unsigned char *p, const unsigned char *end) {
	size_t n;
	uint32_t cp, min;
	if (p[0] >= 0xC2 && p[0] <= 0xDF) n = 2, cp = p[0] & 0x1F, min = 0x80;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF) n = 3, cp = p[0] & 0x0F, min = 0x800;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4) n = 4, cp = p[0] & 0x07, min = 0x10000;
	else return 0;
	if ((size_t)(end - p) < n) return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80) return 0;
		cp = cp << 6 | (p[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
	return n;
}

/* p is at an opening quote; returns the position after the closing quote, or NULL. */
static inline const char *pj_scan_string_(const char *p, const char *end) {
	for (p++; p < end;) {
		unsigned char c = (unsigned char)*p;
		if (c == '"') return p + 1;
		if (c < 0x20) return NULL;
		if (c == '\\') {
			if (end - p < 2) return NULL;
			switch (p[1]) {
			case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
				p += 2;
				break;
			case 'u':
				if (end - p < 6) return NULL;
				for (int i = 2; i < 6; i++)
					if (pj_hex_(p[i]) < 0) return NULL;
				p += 6;
				break;
			default:
				return NULL;
			}
		} else if (c >= 0x80) {
			size_t n = pj_utf8_seq_((const unsigned char *)p, (const unsigned char *)end);
			if (n == 0) return NULL;
			p += n;
		} else {
			p++;
		}
	}
	return NULL;
}

static inline const char *pj_digits_(const char *p, const char *end) {
	const char *start = p;
	while (p < end && *p >= '0' && *p <= '9') p++;
	return p == start ? NULL : p;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static inline const char *pj_scan_number_(const char *p, const char *end) {
	if (p < end && *p == '-') p++;
	if (p < end && *p == '0') p++;
	else if (!(p = pj_digits_(p, end))) return NULL;
	if (p < end && *p == '.' && !(p = pj_digits_(p + 1, end))) return NULL;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-')) p++;
		if (!(p = pj_digits_(p, end))) return NULL;
	}
	return p;
}

static inline const char *pj_literal_(const char *p, const char *end, const char *word) {
	size_t n = strlen(word);
	return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

/* Scans one value starting exactly at p; returns the position after it, or NULL. */
static const char *pj_scan_(const char *p, const char *end, int depth) {
	if (p >= end) return NULL;
	switch (*p) {
	case '{':
	case '[': {
		char close = *p == '{' ? '}' : ']';
		if (depth >= PJ_MAX_DEPTH) return NULL;
		p = pj_ws_(p + 1, end);
		if (p < end && *p == close) return p + 1;
		for (;;) {
			if (close == '}') {
				if (p >= end || *p != '"' || !(p = pj_scan_string_(p, end))) return NULL;
				p = pj_ws_(p, end);
				if (p >= end || *p != ':') return NULL;
				p = pj_ws_(p + 1, end);
			}
			if (!(p = pj_scan_(p, end, depth + 1))) return NULL;
			p = pj_ws_(p, end);
			if (p >= end) return NULL;
			if (*p == close) return p + 1;
			if (*p != ',') return NULL;
			p = pj_ws_(p + 1, end);
		}
	}
	case '"':
		return pj_scan_string_(p, end);
	case 't':
		return pj_literal_(p, end, "true");
	case 'f':
		return pj_literal_(p, end, "false");
	case 'n':
		return pj_literal_(p, end, "null");
	default:
		return pj_scan_number_(p, end);
	}
}

/* Validates text as exactly one JSON value (surrounding whitespace allowed). Returns 1 and
 * sets *root on success, 0 when the text is not valid JSON. */
static inline int pj_parse(const char *text, size_t len, pj_value *root) {
	const char *end = text + len;
	const char *p = pj_ws_(text, end);
	const char *after = pj_scan_(p, end, 0);
	if (after == NULL || pj_ws_(after, end) != end) return 0;
	root->p = p;
	root->end = after;
	return 1;
}

static inline int pj_type(pj_value v) {
	if (v.p == NULL || v.p >= v.end) return PJ_INVALID;
	switch (*v.p) {
	case '{': return PJ_OBJECT;
	case '[': return PJ_ARRAY;
	case '"': return PJ_STRING;
	case 't': return PJ_TRUE;
	case 'f': return PJ_FALSE;
	case 'n': return PJ_NULL;
	default: return PJ_NUMBER;
	}
}

/* Iterates an array or object: start with *cursor = NULL; each call that returns 1 sets
 * *item (and *key for objects, a string value) to the next element. */
static inline int pj_next(pj_value container, const char **cursor, pj_value *key, pj_value *item) {
	int t = pj_type(container);
	if (t != PJ_ARRAY && t != PJ_OBJECT) return 0;
	const char *end = container.end, *p;
	if (*cursor == NULL) {
		p = pj_ws_(container.p + 1, end);
	} else {
		p = pj_ws_(*cursor, end);
		if (p >= end || *p != ',') return 0;
		p = pj_ws_(p + 1, end);
	}
	if (p >= end || *p == ']' || *p == '}') return 0;
	if (t == PJ_OBJECT) {
		const char *k = p;
		p = pj_scan_string_(p, end);
		if (key != NULL) key->p = k, key->end = p;
		p = pj_ws_(pj_ws_(p, end) + 1, end); /* past the colon */
	}
	item->p = p;
	item->end = pj_scan_(p, end, 0);
	*cursor = item->end;
	return item->end != NULL;
}

/* Iterates every number inside v at any depth, in document order (v itself when it is a
 * number): start with *cursor = NULL; each call that returns 1 sets *number. One pass over
 * v's text: strings (member names included) are skipped, literals hold no digits. */
static inline int pj_next_number(pj_value v, const char **cursor, pj_value *number) {
	const char *p = *cursor != NULL ? *cursor : v.p;
	while (p != NULL && p < v.end) {
		if (*p == '"') {
			p = pj_scan_string_(p, v.end);
		} else if (*p == '-' || (*p >= '0' && *p <= '9')) {
			number->p = p;
			number->end = pj_scan_number_(p, v.end);
			*cursor = number->end != NULL ? number->end : v.end;
			return number->end != NULL;
		} else {
			p++;
		}
	}
	*cursor = v.end;
	return 0;
}

/* Decodes the next code point of a string body at *p into *cp; returns 0 at the closing
 * quote. Escaped surrogate pairs are joined; a lone surrogate becomes U+FFFD. */
static inline int pj_next_rune_(const char **p, uint32_t *cp) {
	const unsigned char *s = (const unsigned char *)*p;
	if (*s == '"') return 0;
	if (*s == '\\') {
		switch (s[1]) {
		case 'b': *cp = '\b'; break;
		case 'f': *cp = '\f'; break;
		case 'n': *cp = '\n'; break;
		case 'r': *cp = '\r'; break;
		case 't': *cp = '\t'; break;
		case 'u': {
			uint32_t u = 0;
			for (int i = 2; i < 6; i++) u = u << 4 | (uint32_t)pj_hex_(s[i]);
			*p += 6;
			if (u >= 0xD800 && u <= 0xDBFF && s[6] == '\\' && s[7] == 'u') {
				uint32_t lo = 0;
				for (int i = 8; i < 12; i++) lo = lo << 4 | (uint32_t)pj_hex_(s[i]);
				if (lo >= 0xDC00 && lo <= 0xDFFF) {
					*cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
					*p += 6;
					return 1;
				}
			}
			*cp = (u >= 0xD800 && u <= 0xDFFF) ? 0xFFFD : u;
			return 1;
		}
		default: *cp = s[1]; break; /* " \ / */
		}
		*p += 2;
		return 1;
	}
	if (*s < 0x80) {
		*cp = *s;
		*p += 1;
		return 1;
	}
	size_t n = *s >= 0xF0 ? 4 : *s >= 0xE0 ? 3 : 2;
	uint32_t c = *s & (0x7F >> n);
	for (size_t i = 1; i < n; i++) c = c << 6 | (s[i] & 0x3F);
	*cp = c;
	*p += n;
	return 1;
}

static inline size_t pj_utf8_put_(char *out, uint32_t cp) {
	if (cp < 0x80) return out[0] = (char)cp, 1;
	if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Decodes a string value to UTF-8 in out, which needs room for (v.end - v.p) bytes: decoding
 * never makes a string longer than its JSON text. Returns the decoded length. */
static inline size_t pj_string(pj_value v, char *out) {
	const char *p = v.p + 1;
	size_t n = 0;
	uint32_t cp;
	while (pj_next_rune_(&p, &cp)) n += pj_utf8_put_(out + n, cp);
	return n;
}

/* Decodes a string value into a new NUL-terminated buffer (free it); NULL when out of memory. */
static inline char *pj_string_dup(pj_value v, size_t *len) {
	char *out = (char *)malloc((size_t)(v.end - v.p) + 1);
	if (out == NULL) return NULL;
	*len = pj_string(v, out);
	out[*len] = '\0';
	return out;
}

/* Whether string value key decodes to the NUL-terminated UTF-8 text s. */
static inline int pj_string_equals(pj_value key, const char *s) {
	const char *p = key.p + 1;
	size_t left = strlen(s);
	uint32_t cp;
	char enc[4];
	while (pj_next_rune_(&p, &cp)) {
		size_t n = pj_utf8_put_(enc, cp);
		if (n > left || memcmp(s, enc, n) != 0) return 0;
		s += n, left -= n;
	}
	return left == 0;
}

/* Finds member name in object obj (the last one if the name repeats). Returns 0 when obj is
 * not an object or has no such member. */
static inline int pj_get(pj_value obj, const char *name, pj_value *out) {
	const char *cursor = NULL;
	pj_value key, item;
	int found = 0;
	while (pj_next(obj, &cursor, &key, &item)) {
		if (pj_string_equals(key, name)) *out = item, found = 1;
	}
	return found;
}

/* Parses a number value to the nearest double. Returns 0 when v is not a number or is too
 * large for a double. */
static inline int pj_number(pj_value v, double *out) {
	char small[64];
	size_t n = (size_t)(v.end - v.p);
	if (pj_type(v) != PJ_NUMBER) return 0;
	char *text = n < sizeof small ? small : (char *)malloc(n + 1);
	if (text == NULL) return 0;
	memcpy(text, v.p, n);
	text[n] = '\0';
	double d = strtod(text, NULL);
	if (text != small) free(text);
	if (d > 1.7976931348623157e308 || d < -1.7976931348623157e308) return 0;
	*out = d;
	return 1;
}

/* Formats a finite double as ECMAScript's Number.prototype.toString does (the number form
 * of RFC 8785): the shortest digits that read back as x, e.g. 6, 0.1, 1.5e-7, 1e+21.
 * out needs 32 bytes. Returns the length. */
static inline size_t pj_format_number(double x, char *out) {
	char e[40], digits[20];
	size_t k = 0, o = 0;
	int prec, exp10;
	if (x == 0) return memcpy(out, "0", 2), 1; /* also -0 */
	for (prec = 1; prec < 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, x);
		if (strtod(e, NULL) == x) break;
	}
	snprintf(e, sizeof e, "%.*e", prec - 1, x); /* "-d.ddde+XX" with the shortest digits */
	const char *s = e;
	if (*s == '-') out[o++] = '-', s++;
	for (; *s != 'e'; s++)
		if (*s != '.') digits[k++] = *s;
	exp10 = atoi(s + 1);
	int n = exp10 + 1; /* x = 0.digits * 10^n */
	if ((int)k <= n && n <= 21) {
		memcpy(out + o, digits, k), o += k;
		for (int i = (int)k; i < n; i++) out[o++] = '0';
	} else if (0 < n && n <= 21) {
		memcpy(out + o, digits, (size_t)n), o += (size_t)n;
		out[o++] = '.';
		memcpy(out + o, digits + n, k - (size_t)n), o += k - (size_t)n;
	} else if (-6 < n && n <= 0) {
		out[o++] = '0', out[o++] = '.';
		for (int i = n; i < 0; i++) out[o++] = '0';
		memcpy(out + o, digits, k), o += k;
	} else {
		out[o++] = digits[0];
		if (k > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, k - 1), o += k - 1;
		}
		o += (size_t)snprintf(out + o, 8, "e%c%d", n - 1 >= 0 ? '+' : '-', n - 1 >= 0 ? n - 1 : 1 - n);
	}
	out[o] = '\0';
	return o;
}

/* A growing output buffer. After an allocation failure failed is set and appends are dropped. */
typedef struct {
	char *data;
	size_t len, cap;
	int failed;
} pj_buf;

static inline void pj_buf_append(pj_buf *b, const char *s, size_t n) {
	if (b->failed) return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n) cap *= 2;
		char *data = (char *)realloc(b->data, cap);
		if (data == NULL) {
			b->failed = 1;
			return;
		}
		b->data = data, b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
}

static inline void pj_buf_puts(pj_buf *b, const char *s) { pj_buf_append(b, s, strlen(s)); }

/* Appends UTF-8 text s as a JSON string: only '"', '\\' and control characters are escaped
 * (\b \t \n \f \r, others as \u00xx), as RFC 8785 does. */
static inline void pj_buf_quote(pj_buf *b, const char *s, size_t n) {
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;
	pj_buf_append(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\') continue;
		char esc[6] = {'\\', 0, 0, 0, 0, 0};
		size_t len = 2;
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\t': esc[1] = 't'; break;
		case '\n': esc[1] = 'n'; break;
		case '\f': esc[1] = 'f'; break;
		case '\r': esc[1] = 'r'; break;
		default:
			esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
			len = 6;
		}
		pj_buf_append(b, s + run, i - run);
		pj_buf_append(b, esc, len);
		run = i + 1;
	}
	pj_buf_append(b, s + run, n - run);
	pj_buf_append(b, "\"", 1);
}

/* Appends a finite number in the form of pj_format_number. */
static inline void pj_buf_number(pj_buf *b, double x) {
	char text[32];
	pj_buf_append(b, text, pj_format_number(x, text));
}

static inline void pj_buf_free(pj_buf *b) {
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

#endif /* PGFLOW_JSON_H */
