// Returns what the handler was given: its input and ctx.flowInput.
export default async (input: unknown, ctx: { flowInput: unknown }) => ({ input, flowInput: ctx.flowInput });
