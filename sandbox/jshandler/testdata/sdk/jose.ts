// jose: HS256, RS256 and ES256 JWTs signed and verified with crypto.subtle, keys given as PEM
// (SPKI and PKCS #8) and as a secret; the test checks the tokens with Go's crypto.
import { SignJWT, importPKCS8, importSPKI, jwtVerify, decodeProtectedHeader, exportJWK } from "jose";

type Input = { secret: string; rsa: { priv: string; pub: string }; ec: { priv: string; pub: string } };

export default async function handler(input: Input) {
  const claims = { sub: "user-1", role: "worker" };
  const out: Record<string, unknown> = {};
  const keys: Record<string, [CryptoKey | Uint8Array, CryptoKey | Uint8Array]> = {
    HS256: [new TextEncoder().encode(input.secret), new TextEncoder().encode(input.secret)],
    RS256: [await importPKCS8(input.rsa.priv, "RS256"), await importSPKI(input.rsa.pub, "RS256")],
    ES256: [await importPKCS8(input.ec.priv, "ES256"), await importSPKI(input.ec.pub, "ES256")],
  };
  for (const [alg, [signKey, verifyKey]] of Object.entries(keys)) {
    const token = await new SignJWT(claims).setProtectedHeader({ alg }).setIssuedAt().setIssuer("pgflow").setExpirationTime("2h").sign(signKey);
    const { payload } = await jwtVerify(token, verifyKey, { issuer: "pgflow" });
    let tampered = "verified";
    try {
      await jwtVerify(token.slice(0, -4) + (token.endsWith("AAAA") ? "BBBB" : "AAAA"), verifyKey);
    } catch (e) {
      tampered = (e as { code?: string }).code ?? String(e);
    }
    out[alg] = { token, header: decodeProtectedHeader(token), sub: payload.sub, role: payload.role, tampered };
  }
  out.jwk = (await exportJWK(keys.ES256[1] as CryptoKey)).crv;
  return out;
}
