// sum: adds up every number in its input, at any depth, in document order, as doubles from
// 0: [1,[2,{"x":3}],"a"] -> {"sum":6}. A step with dependencies gets {"run": <flow input>,
// "<dep>": <its output>, ...}: when the input is an object with "run" and another member,
// the flow input is left out and only the other members count
// ({"run":[10],"a":[1,2]} -> {"sum":3}).
import { Kind, Result, Value, Writer, parse, parseError, run } from "../../../abi/assemblyscript";
export { pgflow_abi_version } from "../../../abi/assemblyscript";

// The running total across the recursion (AssemblyScript has no closures).
class Total {
  sum: f64 = 0;
  outOfRange: Value | null = null; // the first number too large for a double
}

// Adds every number in v to total; false when one is out of range.
function addNumbers(v: Value, total: Total): bool {
  if (v.kind == Kind.Number) {
    if (!isFinite(v.num)) {
      total.outOfRange = v;
      return false;
    }
    total.sum += v.num;
    return true;
  }
  for (let i = 0; i < v.items.length; i++) {
    if (!addNumbers(v.items[i], total)) return false;
  }
  return true; // strings, booleans and null have no items
}

function isRun(name: Uint8Array): bool {
  return name.length == 3 && name[0] == 0x72 && name[1] == 0x75 && name[2] == 0x6e;
}

// Whether root is a step input with dependencies: an object with "run" and another member.
function hasDependencies(root: Value): bool {
  if (root.kind != Kind.Object) return false;
  let run = false;
  let other = false;
  for (let i = 0; i < root.keys.length; i++) {
    if (isRun(root.keys[i])) run = true;
    else other = true;
  }
  return run && other;
}

function sum(input: Uint8Array, context: Uint8Array): Result {
  const root = parse(input);
  if (root === null) return Result.err("sum: invalid JSON input: " + parseError());
  const total = new Total();
  let ok = true;
  if (hasDependencies(root)) {
    for (let i = 0; ok && i < root.items.length; i++) {
      if (!isRun(root.keys[i])) ok = addNumbers(root.items[i], total);
    }
  } else {
    ok = addNumbers(root, total);
  }
  const bad = total.outOfRange;
  if (bad !== null) {
    // The number's text, shortened: a number out of range can have hundreds of digits.
    const text = bad.text();
    const shown = String.UTF8.decodeUnsafe(text.dataStart, min(text.length, 40)) + (text.length > 40 ? "..." : "");
    return Result.err("sum: number " + shown + " is out of range");
  }
  if (!isFinite(total.sum)) return Result.err("sum: the sum is not a finite number");
  return Result.okBytes(new Writer().raw('{"sum":').number(total.sum).raw("}").toBytes());
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, sum);
}
