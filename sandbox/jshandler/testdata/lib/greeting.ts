export function greeting(name: string): string {
  if (name === "") {
    throw new RangeError("greeting: the name is empty");
  }
  return `Hello, ${name}!`;
}
