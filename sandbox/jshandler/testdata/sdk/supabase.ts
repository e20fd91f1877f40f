// @supabase/supabase-js, unchanged, against the test's fake of Supabase's REST API: a select
// with filters, an insert, a storage upload and an edge function call, with the key from env.
import { createClient } from "@supabase/supabase-js";

export default async function handler(input: { url: string }) {
  const supabase = createClient(input.url, Deno.env.get("SUPABASE_SERVICE_ROLE_KEY")!, { auth: { persistSession: false, autoRefreshToken: false } });
  const { data: rows, error } = await supabase.from("websites").select("id, url").eq("status", "new").order("id").limit(2);
  if (error) throw new Error("select: " + error.message);
  const { data: inserted, error: insertError } = await supabase.from("websites").insert({ url: "https://b.example" }).select().single();
  if (insertError) throw new Error("insert: " + insertError.message);
  const { data: file, error: uploadError } = await supabase.storage.from("pages").upload("a/b.txt", new Blob(["hello"], { type: "text/plain" }));
  if (uploadError) throw new Error("upload: " + uploadError.message);
  const { data: fn, error: fnError } = await supabase.functions.invoke("summarize", { body: { id: 1 } });
  if (fnError) throw new Error("invoke: " + fnError.message);
  return { rows, inserted, file: file?.path, fn };
}
