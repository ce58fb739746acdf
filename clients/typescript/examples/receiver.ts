// A webhook receiver for punctual's deliveries on Node's http: it verifies each delivery
// (Punctual-Signature or Standard Webhooks) against the tenant's secrets, refuses timestamps
// more than 5 minutes from its clock, and processes each delivery once though punctual
// delivers at least once: it de-duplicates on the signed (tenant, key, version), never on the
// unsigned Idempotency-Key header.
//
//   PUNCTUAL_WEBHOOK_SECRETS=new-secret…,old-secret… node receiver.js 127.0.0.1:9000
//
// A real receiver records processed ids in its database, in the same transaction as the work
// the delivery triggers; the set here is only in memory.
import { createServer } from "node:http";
import { deliveryId, verify, WebhookVerificationError } from "punctual-client";

const secrets = (process.env.PUNCTUAL_WEBHOOK_SECRETS ?? "").split(",").filter(Boolean);
const done = new Set<string>();
const [host, port] = (process.argv[2] ?? "127.0.0.1:9000").split(":");

createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    try {
      const d = verify(req.headers, Buffer.concat(chunks), secrets);
      if (!done.has(deliveryId(d))) {
        done.add(deliveryId(d));
        console.log(`timer ${d.tenant}/${d.key} fired (attempt ${d.attempt}):`, d.payload);
      }
      res.writeHead(204).end();
    } catch (e) {
      res.writeHead(e instanceof WebhookVerificationError ? 401 : 500).end();
    }
  });
}).listen(Number(port), host);
