// The official openai SDK, unchanged, against the test's fake of its API: a completion, a
// streamed completion (server-sent events through a ReadableStream) and a file upload
// (FormData and File), with the key from the step's env.
import OpenAI, { toFile } from "openai";

export default async function handler(input: { baseURL: string; prompt: string }) {
  const client = new OpenAI({ baseURL: input.baseURL, apiKey: Deno.env.get("OPENAI_API_KEY"), maxRetries: 0 });
  const chat = await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: input.prompt }] });
  const stream = await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: input.prompt }], stream: true });
  let streamed = "";
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  const file = await client.files.create({ file: await toFile(new Blob(['{"a":1}\n']), "batch.jsonl"), purpose: "batch" });
  let refused = "";
  try {
    await client.models.list();
  } catch (e) {
    refused = `${(e as Error).constructor.name} ${(e as { status?: number }).status}`;
  }
  return { reply: chat.choices[0].message.content, usage: chat.usage?.total_tokens, streamed, file: [file.id, file.filename, file.bytes], refused };
}
