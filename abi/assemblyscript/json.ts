// A small JSON reader and writer for handlers, working on UTF-8 bytes (what crosses the
// ABI), so no text is converted to AssemblyScript's UTF-16 strings unless asked for.
//
//   const root = parse(input);            // null when input is not valid JSON: see parseError()
//   const name = root.get("run")?.get("name");
//   if (name && name.kind == Kind.String) ...
//
// Writer builds output in the canonical form the examples share: no spaces, strings
// escaped as RFC 8785 does, numbers as ECMAScript prints them.

import { formatNumber, parseNumber } from "./number";

export enum Kind {
  Null,
  False,
  True,
  Number,
  String,
  Array,
  Object,
}

/** One parsed JSON value. */
export class Value {
  kind: Kind;
  /** Number: the nearest double (+-Infinity when too large for one). */
  num: f64 = 0;
  /** String: the decoded text, UTF-8. */
  str: Uint8Array = new Uint8Array(0);
  /** Array: the elements. Object: the member values, in input order. */
  items: Array<Value> = new Array<Value>(0);
  /** Object: the member names (decoded UTF-8), parallel to items. */
  keys: Array<Uint8Array> = new Array<Uint8Array>(0);
  /** The value's exact JSON text is source[start:end). */
  source: Uint8Array;
  start: i32;
  end: i32 = 0;

  constructor(kind: Kind, source: Uint8Array, start: i32) {
    this.kind = kind;
    this.source = source;
    this.start = start;
  }

  /** The object member called name (the last one if the name repeats), or null. */
  get(name: string): Value | null {
    if (this.kind != Kind.Object) return null;
    const want = Uint8Array.wrap(String.UTF8.encode(name));
    for (let i = this.keys.length - 1; i >= 0; i--) {
      if (bytesEqual(this.keys[i], want)) return this.items[i];
    }
    return null;
  }

  /** The value's JSON text exactly as it appears in the input. */
  text(): Uint8Array {
    return this.source.subarray(this.start, this.end);
  }

  /** A String value's text as an AssemblyScript string. */
  toText(): string {
    return String.UTF8.decodeUnsafe(this.str.dataStart, this.str.length);
  }
}

function bytesEqual(a: Uint8Array, b: Uint8Array): bool {
  if (a.length != b.length) return false;
  return memory.compare(a.dataStart, b.dataStart, a.length) == 0;
}

let lastError = "";

/** Why the last parse returned null. */
export function parseError(): string {
  return lastError;
}

const MAX_DEPTH = 512;

/** Parses one JSON document (RFC 8259, UTF-8). Returns null when it is not valid JSON. */
export function parse(data: Uint8Array): Value | null {
  const p = new Parser(data);
  p.ws();
  const v = p.value(0);
  if (v === null) {
    lastError = "invalid JSON at byte " + p.pos.toString();
    return null;
  }
  p.ws();
  if (p.pos != data.length) {
    lastError = "invalid JSON: unexpected data at byte " + p.pos.toString();
    return null;
  }
  return v;
}

class Parser {
  data: Uint8Array;
  pos: i32 = 0;

  constructor(data: Uint8Array) {
    this.data = data;
  }

  peek(): i32 {
    return this.pos < this.data.length ? <i32>this.data[this.pos] : -1;
  }

  ws(): void {
    for (;;) {
      const c = this.peek();
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) return;
      this.pos++;
    }
  }

  value(depth: i32): Value | null {
    const c = this.peek();
    const v = new Value(Kind.Null, this.data, this.pos);
    if (c == 0x7b || c == 0x5b) {
      if (depth >= MAX_DEPTH) return null;
      if (!this.container(v, c == 0x7b, depth)) return null;
    } else if (c == 0x22) {
      v.kind = Kind.String;
      const s = this.string();
      if (s === null) return null;
      v.str = s;
    } else if (c == 0x74) {
      v.kind = Kind.True;
      if (!this.literal("true")) return null;
    } else if (c == 0x66) {
      v.kind = Kind.False;
      if (!this.literal("false")) return null;
    } else if (c == 0x6e) {
      if (!this.literal("null")) return null;
    } else {
      v.kind = Kind.Number;
      if (!this.number()) return null;
      v.num = parseNumber(this.data, v.start, this.pos);
    }
    v.end = this.pos;
    return v;
  }

  container(v: Value, isObject: bool, depth: i32): bool {
    v.kind = isObject ? Kind.Object : Kind.Array;
    const close = isObject ? 0x7d : 0x5d;
    this.pos++;
    this.ws();
    if (this.peek() == close) {
      this.pos++;
      return true;
    }
    for (;;) {
      if (isObject) {
        if (this.peek() != 0x22) return false;
        const key = this.string();
        if (key === null) return false;
        v.keys.push(key);
        this.ws();
        if (this.peek() != 0x3a) return false;
        this.pos++;
        this.ws();
      }
      const item = this.value(depth + 1);
      if (item === null) return false;
      v.items.push(item);
      this.ws();
      const c = this.peek();
      this.pos++;
      if (c == close) return true;
      if (c != 0x2c) return false;
      this.ws();
    }
    return false; // not reached: the loop only returns
  }

  literal(word: string): bool {
    for (let i = 0; i < word.length; i++) {
      if (this.peek() != word.charCodeAt(i)) return false;
      this.pos++;
    }
    return true;
  }

  digits(): bool {
    const start = this.pos;
    while (this.peek() >= 0x30 && this.peek() <= 0x39) this.pos++;
    return this.pos > start;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  number(): bool {
    if (this.peek() == 0x2d) this.pos++;
    if (this.peek() == 0x30) this.pos++;
    else if (!this.digits()) return false;
    if (this.peek() == 0x2e) {
      this.pos++;
      if (!this.digits()) return false;
    }
    if (this.peek() == 0x65 || this.peek() == 0x45) {
      this.pos++;
      if (this.peek() == 0x2b || this.peek() == 0x2d) this.pos++;
      if (!this.digits()) return false;
    }
    return true;
  }

  hex4(at: i32): i32 {
    if (at + 4 > this.data.length) return -1;
    let u = 0;
    for (let i = at; i < at + 4; i++) {
      const c = <i32>this.data[i];
      let h = -1;
      if (c >= 0x30 && c <= 0x39) h = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) h = c - 0x61 + 10;
      else if (c >= 0x41 && c <= 0x46) h = c - 0x41 + 10;
      if (h < 0) return -1;
      u = (u << 4) | h;
    }
    return u;
  }

  /** Decodes the string at pos (an opening quote) to UTF-8. Escaped surrogate pairs are
   * joined; a lone surrogate becomes U+FFFD, as Go's encoding/json does. */
  string(): Uint8Array | null {
    const out = new Writer();
    const data = this.data;
    this.pos++;
    for (;;) {
      const c = this.peek();
      if (c < 0) return null;
      if (c == 0x22) {
        this.pos++;
        return out.toBytes();
      }
      if (c < 0x20) return null;
      if (c == 0x5c) {
        const e = this.pos + 1 < data.length ? <i32>data[this.pos + 1] : -1;
        this.pos += 2;
        if (e == 0x22 || e == 0x5c || e == 0x2f) out.byte(<u8>e);
        else if (e == 0x62) out.byte(0x08);
        else if (e == 0x66) out.byte(0x0c);
        else if (e == 0x6e) out.byte(0x0a);
        else if (e == 0x72) out.byte(0x0d);
        else if (e == 0x74) out.byte(0x09);
        else if (e == 0x75) {
          let u = this.hex4(this.pos);
          if (u < 0) return null;
          this.pos += 4;
          if (u >= 0xd800 && u <= 0xdbff && this.peek() == 0x5c && this.pos + 1 < data.length && data[this.pos + 1] == 0x75) {
            const lo = this.hex4(this.pos + 2);
            if (lo < 0) return null;
            if (lo >= 0xdc00 && lo <= 0xdfff) {
              u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
              this.pos += 6;
            }
          }
          if (u >= 0xd800 && u <= 0xdfff) u = 0xfffd;
          out.codePoint(u);
        } else return null;
        continue;
      }
      if (c < 0x80) {
        out.byte(<u8>c);
        this.pos++;
        continue;
      }
      const n = utf8Length(data, this.pos);
      if (n == 0) return null;
      for (let i = 0; i < n; i++) out.byte(data[this.pos + i]);
      this.pos += n;
    }
    return null; // not reached: the loop only returns
  }
}

/** Length of the valid UTF-8 sequence at data[at] (a byte >= 0x80), or 0. */
function utf8Length(data: Uint8Array, at: i32): i32 {
  const b0 = <u32>data[at];
  let n = 0;
  let cp: u32 = 0;
  let min: u32 = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
    cp = b0 & 0x1f;
    min = 0x80;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    cp = b0 & 0x0f;
    min = 0x800;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    cp = b0 & 0x07;
    min = 0x10000;
  } else return 0;
  if (at + n > data.length) return 0;
  for (let i = 1; i < n; i++) {
    const b = <u32>data[at + i];
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

const HEX = "0123456789abcdef";

/** Builds UTF-8 output. */
export class Writer {
  private buf: Uint8Array = new Uint8Array(64);
  private len: i32 = 0;

  private reserve(n: i32): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const next = new Uint8Array(cap);
    memory.copy(next.dataStart, this.buf.dataStart, this.len);
    this.buf = next;
  }

  byte(b: u8): Writer {
    this.reserve(1);
    this.buf[this.len++] = b;
    return this;
  }

  bytes(b: Uint8Array): Writer {
    this.reserve(b.length);
    memory.copy(this.buf.dataStart + this.len, b.dataStart, b.length);
    this.len += b.length;
    return this;
  }

  /** Appends s, encoded as UTF-8, as is (for JSON punctuation and names). */
  raw(s: string): Writer {
    return this.bytes(Uint8Array.wrap(String.UTF8.encode(s)));
  }

  codePoint(cp: i32): Writer {
    if (cp < 0x80) return this.byte(<u8>cp);
    if (cp < 0x800) return this.byte(<u8>(0xc0 | (cp >> 6))).byte(<u8>(0x80 | (cp & 0x3f)));
    if (cp < 0x10000) {
      return this.byte(<u8>(0xe0 | (cp >> 12)))
        .byte(<u8>(0x80 | ((cp >> 6) & 0x3f)))
        .byte(<u8>(0x80 | (cp & 0x3f)));
    }
    return this.byte(<u8>(0xf0 | (cp >> 18)))
      .byte(<u8>(0x80 | ((cp >> 12) & 0x3f)))
      .byte(<u8>(0x80 | ((cp >> 6) & 0x3f)))
      .byte(<u8>(0x80 | (cp & 0x3f)));
  }

  /** Appends UTF-8 text as a JSON string: only '"', '\' and control characters are escaped
   * (\b \t \n \f \r, others as \u00xx), as RFC 8785 does. */
  quote(text: Uint8Array): Writer {
    this.byte(0x22);
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (c == 0x22 || c == 0x5c) this.byte(0x5c).byte(c);
      else if (c == 0x08) this.raw("\\b");
      else if (c == 0x09) this.raw("\\t");
      else if (c == 0x0a) this.raw("\\n");
      else if (c == 0x0c) this.raw("\\f");
      else if (c == 0x0d) this.raw("\\r");
      else if (c < 0x20) {
        this.raw("\\u00")
          .byte(<u8>HEX.charCodeAt(c >> 4))
          .byte(<u8>HEX.charCodeAt(c & 15));
      } else this.byte(c);
    }
    return this.byte(0x22);
  }

  /** quote for an AssemblyScript string. */
  quoteString(s: string): Writer {
    return this.quote(Uint8Array.wrap(String.UTF8.encode(s)));
  }

  /** Appends a finite number: the shortest form that reads back as x (formatNumber). */
  number(x: f64): Writer {
    return this.raw(formatNumber(x));
  }

  toBytes(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}
