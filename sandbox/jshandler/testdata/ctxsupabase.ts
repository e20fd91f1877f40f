// ctx.supabase as pgflow's handlers use it: PostgREST's select with a filter and an insert
// (sandbox/jshandler: TestCtxSupabase*).
export default async function (_input: unknown, ctx: any) {
  const { data: rows, error } = await ctx.supabase.from("websites").select("id, url").eq("status", "new");
  if (error) return { error: error.message };
  const { data: inserted, error: insertError } = await ctx.supabase.from("websites").insert({ url: "https://b.example" }).select().single();
  if (insertError) return { error: insertError.message };
  return { rows, inserted, same: ctx.supabase === ctx.supabase };
}
