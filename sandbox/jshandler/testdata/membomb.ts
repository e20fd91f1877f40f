export default async function handler() {
  const keep: string[] = [];
  for (let i = 0; ; i++) keep.push("x".repeat(1024) + i);
}
