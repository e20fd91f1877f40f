// @aws-sdk/client-s3, unchanged, against the test's fake of S3, which checks every request's
// SigV4 signature: PutObject, GetObject and a signed request the fake refuses.
import { GetObjectCommand, PutObjectCommand, S3Client, S3ServiceException } from "@aws-sdk/client-s3";

export default async function handler(input: { endpoint: string }) {
  const client = (secret: string) => new S3Client({
    region: "eu-west-1",
    endpoint: input.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: Deno.env.get("AWS_ACCESS_KEY_ID")!, secretAccessKey: secret },
  });
  const s3 = client(Deno.env.get("AWS_SECRET_ACCESS_KEY")!);
  const put = await s3.send(new PutObjectCommand({ Bucket: "pages", Key: "a b/ü.txt", Body: "hello, S3", ContentType: "text/plain" }));
  const got = await s3.send(new GetObjectCommand({ Bucket: "pages", Key: "a b/ü.txt" }));
  const body = await got.Body!.transformToString();
  let refused = "";
  try {
    await client("a-wrong-secret").send(new GetObjectCommand({ Bucket: "pages", Key: "a b/ü.txt" }));
  } catch (e: any) {
    refused = `${e instanceof S3ServiceException} ${e.name} ${e.$metadata?.httpStatusCode}`;
  }
  return { etag: put.ETag, body, type: got.ContentType, refused };
}
