// Top-level code runs once, when the step loads, and is shared by every task: capabilities
// are refused there (the handler may still load).
let refused = "";
fetch("https://api.example.com/config").catch((e: Error) => (refused = e.message));
export default async () => ({ refused });
