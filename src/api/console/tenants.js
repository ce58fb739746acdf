// The console's Tenants page: each tenant's figures as `/metrics` gives them per tenant
// (quota use, webhook deliveries, their success and lateness, refusals by reason, queue),
// read every 2 s with the metrics token. A tenant's token cannot read `/metrics`: the page
// then shows the tenant named at sign-in only, with a link to its own pages.
"use strict";

(() => {
  const M = PunctualMetrics;
  const C = PunctualConsole;
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 2000;
  const WINDOW = 31; // readings kept: the last minute at one every 2 s
  const OTHER = "other"; // where /metrics counts the tenants beyond the 64 with series of their own

  let readings = []; // [{at (ms), tenants: Map}]
  let poll = null;
  let scraping = false;

  function empty() {
    return {
      pending: null,
      quota: null,
      attempts: 0,
      successes: 0,
      heldBack: 0,
      dead: 0,
      latency: new Map(),
      refusals: new Map(), // reason -> count (counters)
      queue: null,
    };
  }

  const COUNTED = {
    punctual_webhook_attempts_total: (t, v) => (t.attempts += v),
    punctual_webhook_successes_total: (t, v) => (t.successes += v),
    punctual_webhook_refused_total: (t, v) => add(t.refusals, "held back by a cap", v),
    punctual_webhook_dead_letters: (t, v) => (t.dead += v),
    punctual_queue_receives_refused_total: (t, v) => add(t.refusals, "queue receive refused", v),
    punctual_tenant_pending: (t, v) => (t.pending = v),
    punctual_tenant_quota: (t, v) => (t.quota = v),
  };

  function add(map, key, v) {
    map.set(key, (map.get(key) || 0) + v);
  }

  function queueOf(t) {
    if (!t.queue) t.queue = { ready: 0, inFlight: 0, delayed: 0, oldest: null };
    return t.queue;
  }

  // Per tenant, summed over shards.
  function byTenant(samples) {
    const out = new Map();
    for (const s of samples) {
      const name = s.labels.tenant;
      if (name === undefined || !Number.isFinite(s.value)) continue;
      if (!out.has(name)) out.set(name, empty());
      const t = out.get(name);
      if (COUNTED[s.name]) COUNTED[s.name](t, s.value);
      else if (s.name === "punctual_webhook_failures_total") add(t.refusals, "failed: " + s.labels.class, s.value);
      else if (s.name === "punctual_tenant_conflicts_total") add(t.refusals, "conflict: " + s.labels.code, s.value);
      else if (s.name === "punctual_webhook_delivery_latency_seconds_bucket") add(t.latency, Number(s.labels.le === "+Inf" ? Infinity : s.labels.le), s.value);
      else if (s.name === "punctual_queue_ready") queueOf(t).ready += s.value;
      else if (s.name === "punctual_queue_in_flight") queueOf(t).inFlight += s.value;
      else if (s.name === "punctual_queue_delayed") queueOf(t).delayed += s.value;
      else if (s.name === "punctual_queue_oldest_ready_age_seconds") queueOf(t).oldest = s.value;
    }
    return out;
  }

  // What one tenant did between two readings (the later alone after a restart).
  function since(a, b) {
    const buckets = [...b.latency].sort((x, y) => x[0] - y[0]);
    if (!a || b.attempts < a.attempts) return { ...b, buckets };
    const refusals = new Map();
    for (const [k, v] of b.refusals) refusals.set(k, Math.max(0, v - (a.refusals.get(k) || 0)));
    return {
      ...b,
      attempts: b.attempts - a.attempts,
      successes: b.successes - a.successes,
      refusals,
      buckets: buckets.map(([le, n]) => [le, Math.max(0, n - (a.latency.get(le) || 0))]),
    };
  }

  async function scrape() {
    if (scraping) return;
    scraping = true;
    const r = await C.api("GET", "/metrics");
    scraping = false;
    if (r.status !== 200) {
      ownOnly(r);
      return;
    }
    C.show("tenants-error", "");
    readings.push({ at: Date.now(), tenants: byTenant(M.parse(r.text)) });
    if (readings.length > WINDOW) readings.shift();
    render();
  }

  function link(name) {
    const a = document.createElement("a");
    a.href = "#tenant/" + C.seg(name);
    a.textContent = name;
    return a;
  }

  // A tenant's token: /metrics is refused; its own tenant, named at sign-in, is all it opens.
  function ownOnly(r) {
    const own = C.ownTenant();
    const body = $("tenant-table").tBodies[0];
    body.replaceChildren();
    if (r.status === 401 && own) {
      const tr = document.createElement("tr");
      tr.dataset.tenant = own;
      const name = document.createElement("td");
      name.className = "text";
      name.append(link(own));
      tr.append(name);
      const rest = C.cell("figures per tenant need the metrics token", "text");
      rest.colSpan = 9;
      tr.append(rest);
      body.append(tr);
      $("tenants-window").textContent = `This token opens tenant ${own} only.`;
      C.show("tenants-error", "");
      return;
    }
    const hint = r.status === 401 ? " (a tenant's token: name the tenant when signing in to open its pages)" : "";
    C.show("tenants-error", C.refusal("Reading /metrics", r) + hint);
  }

  function percent(part, whole) {
    return whole > 0 ? `${((100 * part) / whole).toFixed(1)} %` : "–";
  }

  // Quota use as text and a bar drawn here.
  function quotaCell(t) {
    const td = document.createElement("td");
    td.className = "text";
    if (t.quota === null || t.pending === null) {
      td.textContent = "no quota";
      return td;
    }
    const share = t.quota > 0 ? Math.min(1, t.pending / t.quota) : 0;
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    for (const [k, v] of [["width", 60], ["height", 10], ["class", "bar"], ["role", "img"]]) svg.setAttribute(k, String(v));
    svg.setAttribute("aria-label", `${percent(t.pending, t.quota)} of the quota`);
    const back = document.createElementNS(NS, "rect");
    for (const [k, v] of [["width", 60], ["height", 10], ["class", "bar-back"]]) back.setAttribute(k, String(v));
    const used = document.createElementNS(NS, "rect");
    for (const [k, v] of [["width", (60 * share).toFixed(1)], ["height", 10], ["class", share > 0.9 ? "bar-used over" : "bar-used"]]) used.setAttribute(k, String(v));
    svg.append(back, used);
    td.append(svg, ` ${t.pending} of ${t.quota} (${percent(t.pending, t.quota)})`);
    return td;
  }

  function render() {
    const first = readings[0];
    const last = readings[readings.length - 1];
    const seconds = (last.at - first.at) / 1e3;
    const names = [...last.tenants.keys()].sort();
    const body = $("tenant-table").tBodies[0];
    body.replaceChildren(
      ...names.map((name) => {
        const now = last.tenants.get(name);
        const before = readings.length > 1 ? first.tenants.get(name) : null;
        return row(name, since(before, now), since(null, now), seconds);
      }),
    );
    $("tenants-window").textContent =
      (readings.length > 1
        ? `Deliveries, success and lateness over the last ${Math.round(seconds)} s (since the start where none was delivered in it), read from /metrics every ${POLL_MS / 1e3} s; refusals since the start; pending, dead letters and queues now.`
        : "Deliveries, success, lateness and refusals since the server started; pending, dead letters and queues now.") +
      (names.length ? "" : " No tenant has figures yet.");
  }

  // `d`: the window; `all`: since the start, for success and lateness when the window had
  // no delivery, and for refusals.
  function row(name, d, all, seconds) {
    const tr = document.createElement("tr");
    tr.dataset.tenant = name;
    const first = document.createElement("td");
    first.className = "text";
    first.append(link(name));
    // The exposition counts deliveries of the tenants beyond its 64 under this name too.
    if (name === OTHER) first.append(" (and the tenants beyond 64)");
    tr.append(first, C.cell(d.pending === null ? "–" : String(d.pending)), quotaCell(d));
    tr.append(C.cell(seconds > 0 ? (d.attempts / seconds).toFixed(1) : "–"));
    const w = d.attempts > 0 ? d : all;
    const scope = w === d ? "" : " since start";
    tr.append(C.cell(w.attempts > 0 ? `${percent(w.successes, w.attempts)} (${w.successes} of ${w.attempts})${scope}` : "–"));
    for (const q of [0.5, 0.99]) {
      const v = M.quantile(w.buckets, q);
      tr.append(C.cell(v === null ? "–" : C.duration(v, w.buckets) + scope));
    }
    tr.append(C.cell(String(d.dead)));
    const q = d.queue;
    tr.append(C.cell(q ? `${q.ready + q.delayed} queued, ${q.inFlight} in flight` : "–", "text"));
    const reasons = [...all.refusals].filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`);
    tr.append(C.cell(reasons.length ? reasons.join(", ") : "none", "text refusals"));
    return tr;
  }

  C.page("tenants", {
    enter() {
      readings = [];
      scrape();
      poll = setInterval(scrape, POLL_MS);
    },
    leave() {
      clearInterval(poll);
      poll = null;
    },
  });
})();
