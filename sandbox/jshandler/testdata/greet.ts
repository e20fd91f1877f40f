import { greeting } from "./lib/greeting";

type Input = { run: { name: string } };

export default async function handler(input: Input, ctx: { stepTask: { step_slug: string } }) {
  console.log("greeting", input.run.name, { step: ctx.stepTask.step_slug });
  await Promise.resolve();
  return { greeting: greeting(input.run.name) };
}
