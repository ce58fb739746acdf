// Every route and field of docs/openapi.yaml has its place in the client: each operation a
// method of Client, each query parameter a property of its options, each property of each
// schema a property of the interface in src/types.ts that carries it (read with the
// TypeScript compiler). A route or field added to the document fails this test until the
// client has it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";
import YAML from "yaml";
import { Client } from "punctual-client";
import { ROOT } from "./harness.mjs";

const OPERATIONS = {
  putTimer: "put", getTimer: "get", cancelTimer: ["cancelIf", "CancelOptions"], postBatch: "batch", listTimers: ["list", "ListOptions"],
  bulkCancel: ["cancelPrefix", "CancelPrefixOptions"], getAction: "action",
  listDeadLetters: ["deadLetters", "DeadListOptions"], redriveDeadLetter: "redrive", discardDeadLetter: "discard",
  getHistory: ["history", "HistoryOptions"],
  health: "health", metrics: "metrics", clusterStatus: "cluster",
  listSchedules: ["listSchedules", "ScheduleListOptions"], putSchedule: "putSchedule",
  getSchedule: ["getSchedule", "GetScheduleOptions"], deleteSchedule: "deleteSchedule", pauseSchedule: "pauseSchedule",
  resumeSchedule: "resumeSchedule",
  getQueue: "queue", receiveMessages: "receive", ackMessages: "ack", nackMessages: "nack", extendMessages: "extend",
};
// Schema → the interface that carries its properties.
const SCHEMAS = {
  TimerFields: "TimerSpec", PutTimerRequest: "TimerSpec", BatchItemRequest: "BatchItem", Scheduled: "Scheduled",
  Timer: "PendingTimer", Callback: "Callback", Debounce: "Debounce", DebounceState: "DebounceState", Retry: "DeliveryRetry", Delivery: "Delivery", DeadLetter: "DeadLetter",
  HistoryPage: "HistoryPage", HistoryEntry: "HistoryEntry", HistoryAttempt: "HistoryAttempt", TimerPage: "TimerPage", ListedTimer: "ListedTimer",
  ActionStarted: "ActionStarted", Action: "Action",
  WebhookDelivery: "WebhookDelivery", BatchItemScheduled: "BatchResult", BatchItemFailed: "BatchResult",
  HealthOk: "Health", HealthDegraded: "Health", HealthUnavailable: "Health", HealthDraining: "Health", ErrorDetail: "ErrorDetail",
  ClusterStatus: "ClusterStatus", ClusterHolder: "ClusterHolder", ClusterPartitions: "ClusterPartitions",
  ClusterEpochs: "ClusterEpochs", ClusterThisNode: "ClusterThisNode",
  PutScheduleRequest: "ScheduleSpec", RecurringSchedule: "RecurringSchedule", RecurringScheduleList: "SchedulePage",
  ReceiveRequest: "ReceiveOptions", QueueMessage: "QueueMessage", NackRequest: "NackRequest", ExtendRequest: "ExtendRequest",
  QueueDepth: "QueueDepth",
};
// Envelopes the client unwraps: their one property.
const ENVELOPES = {
  BatchRequest: "timers", BatchResponse: "results", DeadList: "dead", Error: "error",
  ReceivedMessages: "messages", AckRequest: "receipts", SettleResults: "results",
};

const doc = YAML.parse(readFileSync(path.join(ROOT, "docs", "openapi.yaml"), "utf8"));

/** Interface name → its property names (those of the interfaces it extends included). */
export function interfaces(file) {
  const src = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const own = new Map();
  const bases = new Map();
  src.forEachChild((n) => {
    if (!ts.isInterfaceDeclaration(n)) return;
    own.set(n.name.text, new Set(n.members.filter((m) => m.name).map((m) => m.name.getText(src).replace(/^"|"$/g, ""))));
    bases.set(n.name.text, (n.heritageClauses ?? []).flatMap((h) => h.types.map((t) => t.expression.getText(src))));
  });
  const all = (name) => new Set([...(own.get(name) ?? []), ...(bases.get(name) ?? []).flatMap((b) => [...all(b)])]);
  return new Map([...own.keys()].map((k) => [k, all(k)]));
}

const TYPES = interfaces(path.resolve(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname), "..", "src", "types.ts"));

function properties(schemas, s) {
  if (s.$ref) return properties(schemas, schemas[s.$ref.split("/").pop()]);
  const out = { ...(s.properties ?? {}) };
  for (const comb of ["allOf", "oneOf", "anyOf"]) for (const sub of s[comb] ?? []) Object.assign(out, properties(schemas, sub));
  return out;
}

test("every route has a client method", () => {
  const missing = [];
  let seen = 0;
  for (const [p, item] of Object.entries(doc.paths)) {
    for (const [verb, op] of Object.entries(item)) {
      if (!["get", "put", "post", "delete", "patch"].includes(verb)) continue;
      seen++;
      const want = OPERATIONS[op.operationId];
      if (!want) {
        missing.push(`${verb.toUpperCase()} ${p} (${op.operationId}) has no client method`);
        continue;
      }
      const [method, query] = Array.isArray(want) ? want : [want];
      if (typeof Client.prototype[method] !== "function") missing.push(`Client.${method} does not exist`);
      for (const param of op.parameters ?? []) {
        if (param.in === "query" && !TYPES.get(query)?.has(param.name)) {
          missing.push(`${op.operationId}: query parameter ${param.name} has no property`);
        }
      }
    }
  }
  assert.deepEqual(missing, []);
  assert.equal(seen, Object.keys(OPERATIONS).length, "an operation the client maps is gone from the document");
});

test("every schema field has a property", () => {
  const schemas = doc.components.schemas;
  const missing = [];
  for (const [name, s] of Object.entries(schemas).sort()) {
    const props = Object.keys(properties(schemas, s));
    if (props.length === 0 || (s.allOf ?? []).some((x) => x.$ref === "#/components/schemas/Error")) continue;
    if (ENVELOPES[name]) {
      assert.deepEqual(props, [ENVELOPES[name]], name);
      continue;
    }
    const carrier = TYPES.get(SCHEMAS[name]);
    if (!carrier) {
      missing.push(`schema ${name} (${props}) has no interface`);
      continue;
    }
    for (const p of props) if (!carrier.has(p)) missing.push(`schema ${name}: field ${p} is not in ${SCHEMAS[name]}`);
  }
  assert.deepEqual(missing, []);
});

test("the coverage check tells interfaces apart", () => {
  assert.ok(TYPES.get("BatchItem").has("key") && TYPES.get("BatchItem").has("delay_ms"), "extends is followed");
  assert.ok(!TYPES.get("Scheduled").has("payload"));
  const batch = Object.keys(properties(doc.components.schemas, doc.components.schemas.BatchItemRequest));
  for (const f of ["key", "fire_at", "fire_at_ms", "delay_ms", "payload", "callback", "retry"]) assert.ok(batch.includes(f), f);
});
