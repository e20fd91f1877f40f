// Errors at known lines (sandbox/jshandler: TestErrorsNameTheLineTheyHappenOn): each case fails on the line its comment names.
type Ctx = { flowInput: any };

function helper(x: any) {
  return x.deep.field; // line 5
}

export default async function h(input: any, ctx: Ctx) {
  const c = input.case;
  if (c === 1) {
    throw new Error("thrown at line 11");
  }
  if (c === 2) {
    const { name } = input.missing; // line 14
    return name;
  }
  if (c === 3) {
    return helper({}); // line 18
  }
  if (c === 4) {
    const f: any = undefined;
    f(); // line 22
  }
  if (c === 5) {
    await Promise.resolve();
    throw new TypeError(
      "multi-line at 26",
    );
  }
  if (c === 6) {
    JSON.parse("{bad"); // line 31
  }
  return "none";
}
