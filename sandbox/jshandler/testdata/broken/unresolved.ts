import { helper } from "./missing";
import fs from "node:fs";
export default async function handler() {
  return helper(fs);
}
