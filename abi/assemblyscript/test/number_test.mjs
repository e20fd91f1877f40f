// Checks abi/assemblyscript/number.ts against V8, whose Number-to-string (shortest, closest,
// ties to even) and parseFloat (nearest, ties to even) are exact. Usage: node number_test.mjs module.wasm
import fs from "node:fs";

const wasm = fs.readFileSync(process.argv[2]);
const { instance } = await WebAssembly.instantiate(wasm, {
  env: { abort: () => { throw new Error("abort called"); } },
});
const ex = instance.exports;

let state = 0x2545f4914f6cdd1dn; // xorshift64*, fixed seed: the same cases every run
function random64() {
  state ^= state >> 12n;
  state ^= (state << 25n) & 0xffffffffffffffffn;
  state ^= state >> 27n;
  return (state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn;
}
const view = new DataView(new ArrayBuffer(8));
function fromBits(bits) {
  view.setBigUint64(0, bits);
  return view.getFloat64(0);
}
function toBits(x) {
  view.setFloat64(0, x);
  return view.getBigUint64(0);
}

function formatted(x) {
  const n = ex.format(x);
  return Buffer.from(new Uint8Array(ex.memory.buffer, ex.bufPtr(), n)).toString();
}
function parsed(text) {
  const bytes = Buffer.from(text);
  new Uint8Array(ex.memory.buffer, ex.bufPtr(), bytes.length).set(bytes);
  return ex.parse(bytes.length);
}

// The exact decimal expansion of the midpoint between finite positive x and the next double.
function midpoint(x) {
  const bits = toBits(x);
  const be = Number((bits >> 52n) & 0x7ffn);
  const frac = bits & ((1n << 52n) - 1n);
  const m = be === 0 ? frac : frac | (1n << 52n);
  const e = be === 0 ? -1074 : be - 1075; // x = m * 2^e; midpoint = (2m+1) * 2^(e-1)
  const odd = 2n * m + 1n;
  if (e - 1 >= 0) return (odd << BigInt(e - 1)).toString();
  const places = 1 - e;
  const digits = (odd * 5n ** BigInt(places)).toString().padStart(places + 1, "0");
  return digits.slice(0, -places) + "." + digits.slice(-places);
}

// JSON number syntax for JS's exponent form ("1e+21" -> "1e21" is also valid; keep as is).
let failures = 0;
let checks = 0;
function expect(what, got, want) {
  checks++;
  if (!Object.is(got, want)) {
    if (failures++ < 20) console.error(`${what}: got ${got}, want ${want}`);
  }
}

const specials = [0, -0, 1, -1, 0.1, 0.2, 0.30000000000000004, 1e21, 1e20, 1e-6, 1e-7, 1.5e-7,
  5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
  9007199254740992, 9007199254740993, 966049109423706.25, 5144263650101101.5, 123456789012345680000];
const values = [...specials];
for (let i = 0; i < 10000; i++) {
  const x = fromBits(random64());
  if (Number.isFinite(x)) values.push(x);
}
for (let i = 0; i < 5000; i++) values.push(Number((Number(random64() % 2000001n) - 1000000) / 100));

for (const x of values) {
  const want = Object.is(x, -0) ? "0" : String(x);
  expect(`format(${want})`, formatted(x), want);
  for (const text of [want, x.toPrecision(17), x.toExponential(25), x.toPrecision(21)]) {
    const json = text.replace("e+", "e");
    expect(`parse(${json})`, parsed(json), parseFloat(json) === 0 && json.startsWith("-") ? -0 : parseFloat(json));
  }
  if (x > 0 && x < 1.7976931348623157e308) {
    // Exact ties round to the even neighbour; a hair above or below decides by itself.
    const mid = midpoint(x);
    expect(`parse(mid ${mid.slice(0, 30)}...)`, parsed(mid), parseFloat(mid));
    const above = mid.includes(".") ? mid + "0000000001" : mid + ".0000000001";
    expect(`parse(above ${mid.slice(0, 30)}...)`, parsed(above), parseFloat(above));
  }
}
for (const text of ["1e400", "-1e400", "1e-400", "0e999999999999", "123456789e-999999999999", "1" + "0".repeat(1000)]) {
  expect(`parse(${text.slice(0, 30)})`, parsed(text), parseFloat(text));
}

console.log(`number.ts: ${checks} checks against V8, ${failures} failures`);
process.exit(failures === 0 ? 0 : 1);
