// Returns the time the handler sees.
export default async () => ({ now: new Date().toISOString() });
