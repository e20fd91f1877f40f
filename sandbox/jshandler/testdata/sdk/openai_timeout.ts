// The openai SDK's timeout option against a server that never answers: its own timer aborts
// the request, and it reports APIConnectionTimeoutError.
import OpenAI from "openai";

export default async function handler(input: { baseURL: string }) {
  const client = new OpenAI({ baseURL: input.baseURL, apiKey: "sk-test", maxRetries: 0, timeout: 300 });
  try {
    await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    return { error: "no error" };
  } catch (e) {
    return { error: (e as Error).constructor.name };
  }
}
