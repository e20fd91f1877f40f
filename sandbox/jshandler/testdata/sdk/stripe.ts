// stripe, unchanged, against the test's fake of Stripe's API: a customer created and listed, an
// API error, and a webhook's signature checked (crypto.subtle's HMAC) with the key from env.
import Stripe from "npm:stripe@23.1.0";

export default async function handler(input: { host: string; port: number; webhook: { payload: string; header: string; secret: string } }) {
  const stripe = new Stripe(Deno.env.get("STRIPE_SECRET_KEY")!, {
    httpClient: Stripe.createFetchHttpClient(),
    host: input.host,
    port: input.port,
    protocol: "http",
    maxNetworkRetries: 1,
  });
  const created = await stripe.customers.create({ email: "ada@example.com", name: "Ada", metadata: { order: "o-1" } });
  const list = await stripe.customers.list({ limit: 2 });
  let missing = "";
  try {
    await stripe.customers.retrieve("cus_missing");
  } catch (e: any) {
    missing = `${e.type} ${e.statusCode} ${e.code}`;
  }
  const event = await stripe.webhooks.constructEventAsync(input.webhook.payload, input.webhook.header, input.webhook.secret);
  let forged = "";
  try {
    await stripe.webhooks.constructEventAsync(input.webhook.payload.replace("paid", "void"), input.webhook.header, input.webhook.secret);
  } catch (e: any) {
    forged = e.type;
  }
  return {
    created: [created.id, created.email, created.metadata.order],
    listed: list.data.map((c) => c.id),
    more: list.has_more,
    missing,
    event: [event.id, event.type],
    forged,
  };
}
