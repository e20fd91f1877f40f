// pgflow-wasm guest library for AssemblyScript: the ABI (pgflow.ts), a JSON reader and
// writer on UTF-8 bytes (json.ts) and exact number conversions (number.ts).
export * from "./pgflow";
export * from "./json";
export * from "./number";
