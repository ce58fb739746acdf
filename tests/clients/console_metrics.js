// The console's reading of /metrics (src/api/console/metrics.js), checked under node by
// tests/console.rs: samples and labels, the histogram per shard and summed, what happened
// between two readings, and percentiles from the buckets. Exits 1 at the first mismatch.
"use strict";
const assert = require("assert");
const fs = require("fs");
const path = require("path");

const source = fs.readFileSync(path.join(__dirname, "../../src/api/console/metrics.js"), "utf8");
const M = new Function(source + "\nreturn PunctualMetrics;")();

const text = (n0, n1, fired) => `# HELP punctual_fire_lateness_seconds Fire lateness
# TYPE punctual_fire_lateness_seconds histogram
punctual_fire_lateness_seconds_bucket{shard="0",le="1e-06"} ${n0[0]}
punctual_fire_lateness_seconds_bucket{shard="0",le="0.001"} ${n0[1]}
punctual_fire_lateness_seconds_bucket{shard="0",le="+Inf"} ${n0[2]}
punctual_fire_lateness_seconds_bucket{shard="1",le="1e-06"} ${n1[0]}
punctual_fire_lateness_seconds_bucket{shard="1",le="0.001"} ${n1[1]}
punctual_fire_lateness_seconds_bucket{shard="1",le="+Inf"} ${n1[2]}
punctual_timers_fired_total{shard="0"} ${fired}
punctual_timers_pending{shard="1"} 3
punctual_webhook_attempts_total{shard="0",tenant="a \\"quoted\\" {name}"} 1
# EOF
`;

const samples = M.parse(text([1, 2, 2], [0, 0, 0], 2));
assert.strictEqual(samples.length, 9);
assert.strictEqual(samples[8].labels.tenant, 'a "quoted" {name}');
assert.strictEqual(samples[2].value, 2);

const a = M.shards(samples);
assert.deepStrictEqual(Object.keys(a).sort(), ["0", "1", "all"]);
assert.deepStrictEqual(a.all.buckets, [[1e-6, 1], [1e-3, 2], [Infinity, 2]]);
assert.strictEqual(a.all.pending, 3);
assert.strictEqual(M.quantile(a.all.buckets, 0.5), 1e-6);
assert.strictEqual(M.quantile(a.all.buckets, 0.99), 1e-3);
assert.strictEqual(M.max(a.all.buckets), 1e-3);
assert.strictEqual(M.quantile(a["1"].buckets, 0.99), null, "no fires, no percentile");
assert.strictEqual(M.max(a["1"].buckets), null);

// Two more fires, one beyond the last finite bound: the interval holds just those two.
const b = M.shards(M.parse(text([1, 3, 4], [0, 0, 0], 4)));
const d = M.since(a.all, b.all);
assert.strictEqual(d.fired, 2);
assert.strictEqual(M.count(d.buckets), 2);
assert.strictEqual(M.quantile(d.buckets, 0.5), 1e-3);
assert.strictEqual(M.quantile(d.buckets, 0.99), Infinity);
assert.strictEqual(M.max(d.buckets), Infinity);
assert.strictEqual(M.largestFinite(d.buckets), 1e-3);

// A restart between readings: the later reading alone.
const c = M.shards(M.parse(text([0, 1, 1], [0, 0, 0], 1)));
assert.strictEqual(M.since(b.all, c.all), c.all);

// Text that is not the format reads as no samples, not as an error.
assert.deepStrictEqual(M.parse("<html>\n{}\n\n"), []);
assert.deepStrictEqual(M.shards([]).all.buckets, []);
console.log("metrics.js: every check passed");
