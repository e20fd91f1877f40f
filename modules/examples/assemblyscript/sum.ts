// sum: adds up the first array among the input object's values (or the input itself when
// it is an array): {"run":[1,2,3]} -> {"sum":6}. Doubles, added left to right from 0.
import { Kind, Result, Value, Writer, parse, parseError, run } from "../../../abi/assemblyscript";
export { pgflow_abi_version } from "../../../abi/assemblyscript";

function firstArray(root: Value): Value | null {
  if (root.kind == Kind.Array) return root;
  if (root.kind != Kind.Object) return null;
  for (let i = 0; i < root.items.length; i++) {
    if (root.items[i].kind == Kind.Array) return root.items[i];
  }
  return null;
}

function sum(input: Uint8Array, context: Uint8Array): Result {
  const root = parse(input);
  if (root === null) return Result.err("sum: invalid JSON input: " + parseError());
  const numbers = firstArray(root);
  if (numbers === null) return Result.err("sum: input has no array of numbers");
  let total: f64 = 0;
  for (let i = 0; i < numbers.items.length; i++) {
    const item = numbers.items[i];
    if (item.kind != Kind.Number) return Result.err("sum: element " + i.toString() + " is not a number");
    if (!isFinite(item.num)) return Result.err("sum: element " + i.toString() + " is out of range");
    total += item.num;
  }
  if (!isFinite(total)) return Result.err("sum: the sum is not a finite number");
  return Result.okBytes(new Writer().raw('{"sum":').number(total).raw("}").toBytes());
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, sum);
}
