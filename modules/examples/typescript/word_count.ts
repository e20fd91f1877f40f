// The word_count example in TypeScript, for map steps: one line of text -> its words.
// (JavaScript's \s is close to, not exactly, Unicode White_Space: this example is not part of
// the byte-for-byte conformance test of the other languages.)
export default async function wordCount(text: unknown) {
  if (typeof text !== "string") throw new Error("word_count: input must be a JSON string");
  const words = text.split(/\s+/).filter((w) => w !== "").length;
  return { text, words };
}
