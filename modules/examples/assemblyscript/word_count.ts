// word_count: one map element, a string -> {"text":<the string>,"words":<count>}
import { Kind, Result, Writer, parse, parseError, run } from "../../../abi/assemblyscript";
export { pgflow_abi_version } from "../../../abi/assemblyscript";

// Unicode White_Space, the set Go's strings.Fields and Rust's split_whitespace use.
function isSpace(c: u32): bool {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/** Counts runs of non-space code points in valid UTF-8 text. */
function countWords(text: Uint8Array): i32 {
  let words = 0;
  let inWord = false;
  for (let i = 0; i < text.length; ) {
    let c = <u32>text[i];
    const n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (n > 1) {
      c &= 0x7f >> n;
      for (let j = 1; j < n; j++) c = (c << 6) | (<u32>text[i + j] & 0x3f);
    }
    i += n;
    if (isSpace(c)) inWord = false;
    else if (!inWord) {
      inWord = true;
      words++;
    }
  }
  return words;
}

function wordCount(input: Uint8Array, context: Uint8Array): Result {
  const root = parse(input);
  if (root === null) return Result.err("word_count: invalid JSON input: " + parseError());
  if (root.kind != Kind.String) return Result.err("word_count: input must be a JSON string");
  const out = new Writer().raw('{"text":').quote(root.str).raw(',"words":').raw(countWords(root.str).toString()).raw("}");
  return Result.okBytes(out.toBytes());
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, wordCount);
}
