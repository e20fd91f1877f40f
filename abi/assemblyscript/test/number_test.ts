// Test entry for number.ts, driven by number_test.mjs (node): formats and parses through a
// shared buffer so the script can compare with V8's own (exact) conversions.
import { formatNumber, parseNumber } from "../number";

const buf = new Uint8Array(4096);

export function bufPtr(): usize {
  return buf.dataStart;
}

/** Formats x into the buffer; returns the length. */
export function format(x: f64): i32 {
  const b = Uint8Array.wrap(String.UTF8.encode(formatNumber(x)));
  memory.copy(buf.dataStart, b.dataStart, b.length);
  return b.length;
}

/** Parses the len bytes in the buffer (JSON number syntax). */
export function parse(len: i32): f64 {
  return parseNumber(buf, 0, len);
}
