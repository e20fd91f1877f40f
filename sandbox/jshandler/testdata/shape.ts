// Returns what it was given, to compare with what pgflow's own worker gives a handler.
export default async function handler(input: unknown, ctx: any) {
  return { input, flowInput: ctx.flowInput, stepTask: ctx.stepTask, key: ctx.idempotencyKey, readCt: ctx.rawMessage.read_ct };
}
