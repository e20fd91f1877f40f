export default async (input, ctx) => ({ doubled: input.run.n * 2, step: ctx.stepTask.step_slug });
