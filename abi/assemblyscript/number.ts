// Exact conversions between JSON number text and doubles.
//
// AssemblyScript's own parseFloat and f64.toString are not exact (parseFloat can be off by
// orders of magnitude for long inputs; toString uses Grisu2, which is not always shortest,
// and prints 138 as "138.0"). These use exact big-integer arithmetic instead:
// parseNumber rounds to the nearest double (ties to even), formatNumber prints the
// shortest digits that read back as the same double, in ECMAScript's format
// (Number.prototype.toString, which RFC 8785 also uses): 6, 0.1, 1.5e-7, 1e+21.

/** Unsigned big integer, little-endian 32-bit limbs, no leading zero limbs. */
class Big {
  d: Array<u32> = new Array<u32>(0);

  static of(v: u64): Big {
    const b = new Big();
    while (v != 0) {
      b.d.push(<u32>v);
      v >>= 32;
    }
    return b;
  }

  clone(): Big {
    const b = new Big();
    b.d = this.d.slice(0);
    return b;
  }

  isZero(): bool {
    return this.d.length == 0;
  }

  /** this = this * m + a */
  mulAdd(m: u32, a: u32): void {
    let carry: u64 = a;
    const d = this.d;
    for (let i = 0; i < d.length; i++) {
      const t = <u64>d[i] * <u64>m + carry;
      d[i] = <u32>t;
      carry = t >> 32;
    }
    if (carry != 0) d.push(<u32>carry);
    this.trim();
  }

  mulPow10(n: i32): void {
    for (; n >= 9; n -= 9) this.mulAdd(1000000000, 0);
    if (n > 0) this.mulAdd(<u32>POW10_U32[n], 0);
  }

  shl(bits: i32): void {
    if (this.isZero() || bits == 0) return;
    const words = bits >> 5;
    const rem = bits & 31;
    const src = this.d;
    const out = new Array<u32>(0);
    for (let i = 0; i < words; i++) out.push(0);
    let carry: u32 = 0;
    for (let i = 0; i < src.length; i++) {
      const v = src[i];
      out.push(rem == 0 ? v : (v << rem) | carry);
      carry = rem == 0 ? 0 : v >>> (32 - rem);
    }
    if (carry != 0) out.push(carry);
    this.d = out;
  }

  /** this >>= 1 */
  shr1(): void {
    const d = this.d;
    for (let i = 0; i < d.length; i++) {
      d[i] = (d[i] >>> 1) | (i + 1 < d.length ? d[i + 1] << 31 : 0);
    }
    this.trim();
  }

  cmp(o: Big): i32 {
    const a = this.d;
    const b = o.d;
    if (a.length != b.length) return a.length < b.length ? -1 : 1;
    for (let i = a.length - 1; i >= 0; i--) {
      if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    }
    return 0;
  }

  /** this -= o; requires this >= o */
  sub(o: Big): void {
    const a = this.d;
    const b = o.d;
    let borrow: i64 = 0;
    for (let i = 0; i < a.length; i++) {
      let t = <i64>a[i] - borrow - (i < b.length ? <i64>b[i] : 0);
      borrow = 0;
      if (t < 0) {
        t += 0x100000000;
        borrow = 1;
      }
      a[i] = <u32>t;
    }
    this.trim();
  }

  /** this += o */
  add(o: Big): void {
    const a = this.d;
    const b = o.d;
    let carry: u64 = 0;
    for (let i = 0; i < b.length || carry != 0; i++) {
      if (i == a.length) a.push(0);
      const t = <u64>a[i] + (i < b.length ? <u64>b[i] : 0) + carry;
      a[i] = <u32>t;
      carry = t >> 32;
    }
  }

  bitLength(): i32 {
    const n = this.d.length;
    return n == 0 ? 0 : (n - 1) * 32 + 32 - <i32>clz(this.d[n - 1]);
  }

  trim(): void {
    while (this.d.length > 0 && this.d[this.d.length - 1] == 0) this.d.pop();
  }
}

const POW10_U32: StaticArray<u32> = [1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000];

// Powers of ten a double holds exactly (Clinger's fast path).
const POW10_F64: StaticArray<f64> = [
  1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
  1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

// 767 significant digits decide the rounding of any double; beyond them only "is anything
// left" matters, kept as one extra non-zero digit.
const MAX_DIGITS = 800;

function signed(neg: bool, x: f64): f64 {
  return neg ? -x : x;
}

/**
 * Parses the JSON number text data[start:end) (which must already be valid JSON number
 * syntax) to the nearest double, ties to even. Returns +-Infinity when it is too large for a
 * double.
 */
export function parseNumber(data: Uint8Array, start: i32, end: i32): f64 {
  let i = start;
  let neg = false;
  if (data[i] == 0x2d) {
    neg = true;
    i++;
  }
  // value = digits * 10^exp10; digits are added nine at a time (chunk, chunkLen).
  const digits = new Big();
  let chunk: u32 = 0;
  let chunkLen = 0;
  let kept = 0;
  let exp10: i64 = 0;
  let sticky = false;
  let afterPoint = false;
  for (; i < end; i++) {
    const c = <i32>data[i];
    if (c == 0x2e) {
      afterPoint = true;
      continue;
    }
    if (c < 0x30 || c > 0x39) break;
    const dgt = c - 0x30;
    if (kept == 0 && dgt == 0) {
      if (afterPoint) exp10--;
      continue;
    }
    if (kept < MAX_DIGITS) {
      chunk = chunk * 10 + <u32>dgt;
      if (++chunkLen == 9) {
        digits.mulAdd(1000000000, chunk);
        chunk = 0;
        chunkLen = 0;
      }
      kept++;
      if (afterPoint) exp10--;
    } else {
      if (dgt != 0) sticky = true;
      if (!afterPoint) exp10++;
    }
  }
  if (chunkLen > 0) digits.mulAdd(POW10_U32[chunkLen], chunk);
  if (i < end) {
    // exponent: [eE][+-]?digits, saturated far beyond any double
    i++;
    let expNeg = false;
    if (data[i] == 0x2b || data[i] == 0x2d) {
      expNeg = data[i] == 0x2d;
      i++;
    }
    let e: i64 = 0;
    for (; i < end; i++) {
      if (e < 100000000) e = e * 10 + <i64>(data[i] - 0x30);
    }
    exp10 += expNeg ? -e : e;
  }
  if (sticky) {
    digits.mulAdd(10, 1);
    kept++;
    exp10--;
  }
  if (digits.isZero()) return signed(neg, 0);
  if (<i64>kept + exp10 > 310) return signed(neg, Infinity);
  if (<i64>kept + exp10 < -324) return signed(neg, 0);

  if (kept <= 15 && exp10 >= -22 && exp10 <= 22) {
    // Both the digits and the power of ten are exact doubles: one rounding, the right one.
    let small: u64 = 0;
    for (let j = digits.d.length - 1; j >= 0; j--) small = (small << 32) | <u64>digits.d[j];
    const x = <f64>small;
    return signed(neg, exp10 >= 0 ? x * POW10_F64[<i32>exp10] : x / POW10_F64[<i32>-exp10]);
  }

  const num = digits;
  const den = Big.of(1);
  if (exp10 > 0) num.mulPow10(<i32>exp10);
  else den.mulPow10(<i32>-exp10);
  // Scale by 2^s so that 2^54 < num/den < 2^56, then divide: q holds the top bits.
  const s = 55 - (num.bitLength() - den.bitLength());
  if (s > 0) num.shl(s);
  else den.shl(-s);
  let q: u64 = 0;
  const t = den.clone();
  t.shl(56);
  for (let b = 56; b >= 0; b--) {
    if (num.cmp(t) >= 0) {
      num.sub(t);
      q |= (<u64>1) << b;
    }
    t.shr1();
  }
  return signed(neg, roundToDouble(q, s, !num.isZero()));
}

/** The double nearest to (q + a fraction, non-zero when sticky) * 2^-s, ties to even. */
function roundToDouble(q: u64, s: i32, sticky: bool): f64 {
  const len = 64 - <i32>clz(q);
  // Keep 53 bits, or fewer for subnormals (no bit below 2^-1074).
  let drop = len - 53;
  if (drop < s - 1074) drop = s - 1074;
  if (drop > len) return 0;
  let m = q >> drop;
  const half = ((q >> (drop - 1)) & 1) != 0;
  const rest = sticky || (q & (((<u64>1) << (drop - 1)) - 1)) != 0;
  if (half && (rest || (m & 1) != 0)) m++;
  let e2 = drop - s; // value = m * 2^e2
  if (m == (<u64>1) << 53) {
    m >>= 1;
    e2++;
  }
  if (m >= (<u64>1) << 52) {
    const biased = e2 + 52 + 1023;
    if (biased >= 2047) return Infinity;
    return reinterpret<f64>((<u64>biased << 52) | (m & (((<u64>1) << 52) - 1)));
  }
  return reinterpret<f64>(m); // subnormal: e2 is -1074
}

/**
 * Formats a finite double as ECMAScript's Number.prototype.toString does: the shortest
 * digits that read back as x (the closest such, ties to even), 0 for -0, exponent form
 * below 1e-6 and from 1e21.
 */
export function formatNumber(x: f64): string {
  if (x == 0) return "0";
  const neg = x < 0;
  if (neg) x = -x;
  const bits = reinterpret<u64>(x);
  const be = <i32>((bits >> 52) & 0x7ff);
  const frac = bits & (((<u64>1) << 52) - 1);
  const f: u64 = be == 0 ? frac : frac | ((<u64>1) << 52);
  const e: i32 = be == 0 ? -1074 : be - 1075; // x = f * 2^e
  const even = (f & 1) == 0; // round-to-even readers accept the interval's ends
  // Below a power of two the next double down is half as far away as the next one up.
  const boundary = frac == 0 && be > 1;

  // Steele & White / Burger & Dybvig free-format digits: x = r/s, the interval of numbers
  // that read back as x is (r - mm)/s .. (r + mp)/s.
  let r: Big, s: Big, mp: Big, mm: Big;
  if (e >= 0) {
    r = Big.of(f);
    r.shl(e + (boundary ? 2 : 1));
    s = Big.of(boundary ? 4 : 2);
    mp = Big.of(1);
    mp.shl(boundary ? e + 1 : e);
    mm = Big.of(1);
    mm.shl(e);
  } else {
    r = Big.of(f);
    r.shl(boundary ? 2 : 1);
    s = Big.of(1);
    s.shl((boundary ? 2 : 1) - e);
    mp = Big.of(boundary ? 2 : 1);
    mm = Big.of(1);
  }

  // k: the smallest power of ten above the interval; starts from an estimate (exact or one
  // too small) and is fixed up.
  let k = <i32>Math.ceil(Math.log10(x) - 1e-10);
  if (k >= 0) s.mulPow10(k);
  else {
    r.mulPow10(-k);
    mp.mulPow10(-k);
    mm.mulPow10(-k);
  }
  let tooLow = true;
  while (tooLow) {
    const high = r.clone();
    high.add(mp);
    const c = high.cmp(s);
    tooLow = even ? c >= 0 : c > 0;
    if (tooLow) {
      s.mulAdd(10, 0);
      k++;
    }
  }

  const digits = new Array<i32>(0);
  let done = false;
  while (!done) {
    r.mulAdd(10, 0);
    mp.mulAdd(10, 0);
    mm.mulAdd(10, 0);
    let d = 0;
    while (r.cmp(s) >= 0) {
      r.sub(s);
      d++;
    }
    const cl = r.cmp(mm);
    const low = even ? cl <= 0 : cl < 0;
    const top = r.clone();
    top.add(mp);
    const ch = top.cmp(s);
    const high = even ? ch >= 0 : ch > 0;
    if (!low && !high) {
      digits.push(d);
      continue;
    }
    if (low && high) {
      // Both d and d+1 read back as x: take the closer, ties to even.
      const twice = r.clone();
      twice.shl(1);
      const c = twice.cmp(s);
      if (c > 0 || (c == 0 && (d & 1) == 1)) d++;
    } else if (high) d++;
    digits.push(d);
    done = true;
  }
  // d+1 cannot reach 10 when k is right; carry anyway rather than print a wrong digit.
  while (digits[digits.length - 1] == 10) {
    digits.pop();
    if (digits.length == 0) {
      digits.push(1);
      k++;
      break;
    }
    digits[digits.length - 1]++;
  }

  let text = "";
  for (let j = 0; j < digits.length; j++) text += String.fromCharCode(0x30 + digits[j]);
  return (neg ? "-" : "") + ecmaScriptForm(text, k);
}

/** Places the decimal point in x = 0.digits * 10^n as ECMAScript does. */
function ecmaScriptForm(digits: string, n: i32): string {
  const k = digits.length;
  if (k <= n && n <= 21) return digits + "0".repeat(n - k);
  if (0 < n && n <= 21) return digits.substring(0, n) + "." + digits.substring(n);
  if (-6 < n && n <= 0) return "0." + "0".repeat(-n) + digits;
  const e = n - 1;
  const mantissa = k > 1 ? digits.charAt(0) + "." + digits.substring(1) : digits;
  return mantissa + "e" + (e >= 0 ? "+" : "-") + (e >= 0 ? e : -e).toString();
}
