// The script a step granted Supabase gets after its handler's bundle (jshandler.Load): it
// hands supabase-js's createClient to the prelude, whose prepare() takes it off globalThis
// and makes ctx.supabase with it (prelude/supabase.js).
import { createClient } from "@supabase/supabase-js";

Object.defineProperty(globalThis, "__pgflow_supabase_js", { value: createClient, configurable: true });
