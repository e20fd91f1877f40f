function down(n: number): number {
  return n === 0 ? 0 : 1 + down(n - 1);
}
export default async function handler(input: { depth: number }) {
  return { depth: down(input.depth) };
}
