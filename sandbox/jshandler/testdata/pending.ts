export default async function handler() {
  await new Promise(() => {});
}
