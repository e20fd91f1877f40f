const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export default async function handler() {
  const order: string[] = [];
  setTimeout(() => order.push("late"), 50);
  const t = setTimeout(() => order.push("cleared"), 10);
  clearTimeout(t);
  queueMicrotask(() => order.push("microtask"));
  await sleep(20);
  order.push("after sleep");
  await sleep(100);
  return order;
}
