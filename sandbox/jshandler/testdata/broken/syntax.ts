export default async function handler(input: { a: number }) {
  const x = input.a +;
  return { x };
}
