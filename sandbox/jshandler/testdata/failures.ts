// How each way of failing reads in the task's error.
export default async function handler(input: { how: string }) {
  switch (input.how) {
    case "string":
      throw "a plain string";
    case "object":
      throw { code: 42, why: "an object" };
    case "reject":
      return Promise.reject(new TypeError("rejected"));
    case "cause":
      throw new Error("outer", { cause: new Error("inner") });
    case "undefined":
      return undefined;
    case "bigint":
      return { n: 1n };
    case "log-error":
      try {
        JSON.parse("{");
      } catch (e) {
        console.error(e);
      }
      return "logged";
  }
  return { how: input.how };
}
