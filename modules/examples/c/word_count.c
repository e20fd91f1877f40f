/* word_count: one map element, a string -> {"text":<the string>,"words":<count>} */
#include "pgflow.h"
#include "pgflow_json.h"

/* Unicode White_Space, the set Go's strings.Fields and Rust's split_whitespace use. */
static int is_space(uint32_t c) {
	return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
	       c == 0x205F || c == 0x3000;
}

static int word_count(pgflow_bytes input, pgflow_bytes context) {
	(void)context;
	pj_value root;
	if (!pj_parse(input.data, input.len, &root)) return pgflow_fail("word_count: invalid JSON input");
	if (pj_type(root) != PJ_STRING) return pgflow_fail("word_count: input must be a JSON string");

	size_t len;
	char *text = pj_string_dup(root, &len);
	if (text == NULL) return pgflow_fail("word_count: out of memory");
	/* The text is valid UTF-8: walk its code points, counting starts of words. */
	long words = 0;
	int in_word = 0;
	for (const unsigned char *p = (const unsigned char *)text, *end = p + len; p < end;) {
		uint32_t c = *p;
		size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
		if (n > 1) {
			c &= 0x7F >> n;
			for (size_t i = 1; i < n; i++) c = c << 6 | (p[i] & 0x3F);
		}
		p += n;
		if (is_space(c)) in_word = 0;
		else if (!in_word) in_word = 1, words++;
	}

	pj_buf out = {0};
	char count[24];
	snprintf(count, sizeof count, "%ld", words);
	pj_buf_puts(&out, "{\"text\":");
	pj_buf_quote(&out, text, len);
	pj_buf_puts(&out, ",\"words\":");
	pj_buf_puts(&out, count);
	pj_buf_puts(&out, "}");
	int status = out.failed ? pgflow_fail("word_count: out of memory") : pgflow_output(out.data, out.len);
	free(text);
	pj_buf_free(&out);
	return status;
}

PGFLOW_HANDLER(word_count)
