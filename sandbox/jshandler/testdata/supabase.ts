// Reads ctx.supabase and reports how it went (sandbox/jshandler: TestCtxSupabase).
export default async function (_input: unknown, ctx: any) {
  try {
    const client = ctx.supabase;
    return { client: typeof client };
  } catch (e: any) {
    return { error: e.message };
  }
}
