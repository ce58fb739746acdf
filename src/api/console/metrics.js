// Reading punctual's `/metrics` (OpenMetrics text) in the console: its samples, the fire
// lateness histogram, fires and pending timers per shard, and percentiles from the histogram's
// buckets. Pure functions over text and numbers; the page (console.js) does the rest.
"use strict";

const PunctualMetrics = (() => {
  const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

  // A number as the format writes it: "+Inf", "-Inf", "NaN" or a decimal.
  function number(text) {
    if (text === "+Inf") return Infinity;
    if (text === "-Inf") return -Infinity;
    return Number(text);
  }

  function labels(text) {
    const out = {};
    for (const m of text.matchAll(LABEL)) {
      out[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    return out;
  }

  // Every sample line as {name, labels, value}; comments, `# EOF` and odd lines skipped.
  function parse(text) {
    const samples = [];
    for (const line of text.split("\n")) {
      if (line === "" || line.startsWith("#")) continue;
      const m = SAMPLE.exec(line);
      if (m) samples.push({ name: m[1], labels: labels(m[2] || ""), value: number(m[3]) });
    }
    return samples;
  }

  function emptyShard() {
    return { fired: 0, pending: 0, buckets: new Map() };
  }

  // Per shard ("0", "1", …): fires so far, pending timers now, and the lateness histogram as
  // cumulative [upper bound in seconds, count] pairs in increasing order; "all" sums them.
  function shards(samples) {
    const by = new Map();
    const of = (shard) => {
      if (!by.has(shard)) by.set(shard, emptyShard());
      return by.get(shard);
    };
    for (const s of samples) {
      const shard = s.labels.shard;
      if (shard === undefined || !Number.isFinite(s.value)) continue;
      if (s.name === "punctual_fire_lateness_seconds_bucket") {
        const b = of(shard).buckets;
        const le = number(s.labels.le);
        b.set(le, (b.get(le) || 0) + s.value);
      } else if (s.name === "punctual_timers_fired_total") {
        of(shard).fired += s.value;
      } else if (s.name === "punctual_timers_pending") {
        of(shard).pending += s.value;
      }
    }
    const all = emptyShard();
    const out = {};
    for (const [shard, v] of by) {
      out[shard] = finish(v);
      all.fired += v.fired;
      all.pending += v.pending;
      for (const [le, n] of v.buckets) all.buckets.set(le, (all.buckets.get(le) || 0) + n);
    }
    out.all = finish(all);
    return out;
  }

  function finish(v) {
    const buckets = [...v.buckets].sort((a, b) => a[0] - b[0]);
    return { fired: v.fired, pending: v.pending, buckets };
  }

  // What happened between two readings of one shard: fires and the lateness buckets counted
  // in between (the later reading alone where a counter went back, after a restart).
  function since(earlier, later) {
    if (!earlier || later.fired < earlier.fired) return later;
    const before = new Map(earlier.buckets);
    const buckets = later.buckets.map(([le, n]) => [le, Math.max(0, n - (before.get(le) || 0))]);
    return { fired: later.fired - earlier.fired, pending: later.pending, buckets };
  }

  // Observations in cumulative buckets.
  function count(buckets) {
    return buckets.length ? buckets[buckets.length - 1][1] : 0;
  }

  // The upper bound of the bucket holding quantile `q` (0 < q ≤ 1), or null with no
  // observations: the percentile is at most this.
  function quantile(buckets, q) {
    const total = count(buckets);
    if (total === 0) return null;
    const rank = Math.max(1, Math.ceil(q * total));
    for (const [le, n] of buckets) if (n >= rank) return le;
    return Infinity;
  }

  // The upper bound of the highest bucket with an observation, or null with none.
  function max(buckets) {
    let top = null;
    let below = 0;
    for (const [le, n] of buckets) {
      if (n > below) top = le;
      below = n;
    }
    return top;
  }

  // The largest finite bound, to say what an observation in the +Inf bucket is beyond.
  function largestFinite(buckets) {
    const finite = buckets.filter(([le]) => Number.isFinite(le));
    return finite.length ? finite[finite.length - 1][0] : 0;
  }

  return { parse, shards, since, count, quantile, max, largestFinite };
})();
