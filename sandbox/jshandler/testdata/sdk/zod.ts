// zod, imported as Deno writes it, validating a flow's input (URLs, e-mails, defaults).
import { z } from "npm:zod@4.6.7";

const Input = z.object({
  name: z.string().min(1),
  email: z.email(),
  site: z.url(),
  age: z.number().int().positive().optional(),
  tags: z.array(z.string()).default([]),
  when: z.iso.datetime(),
});

export default async function handler(input: { good: unknown; bad: unknown }) {
  const ok = Input.parse(input.good);
  const bad = Input.safeParse(input.bad);
  return { ok, issues: bad.success ? [] : bad.error.issues.map((i) => [i.path.join("."), i.code]) };
}
