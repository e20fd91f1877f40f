export default async function handler() {
  while (true) {}
}
