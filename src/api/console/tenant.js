// The console's page of one tenant (`#tenant/{name}`): its queue (`GET /v1/queues/{tenant}`),
// its pending timers by key prefix a page at a time (`GET /v1/timers/{tenant}?prefix=&after=
// &limit=`), its schedules with their next occurrences (`GET /v1/schedules/{tenant}` and
// `GET /v1/schedules/{tenant}/{key}?next=5`), and a link to its dead letters. Reads only:
// the metrics token reads every tenant, a tenant's token its own, and the API refuses the
// rest (the refusal is shown).
"use strict";

(() => {
  const C = PunctualConsole;
  const $ = (id) => document.getElementById(id);
  const PAGE = 50;
  const SCHEDULES = 20; // a page of schedules: each one's next occurrences is one more request
  const NEXT = 5;

  let tenant = "";
  let timerPages = []; // the `after` of each page of timers so far ("" for the first)
  let timerNext = null;
  let schedulePages = [];
  let scheduleNext = null;
  // The latest request of each part: an answer to an earlier tenant or page is dropped.
  const asked = { queue: 0, timers: 0, schedules: 0 };
  const ask = (part) => (asked[part] += 1);

  const iso = (us) => (Number.isFinite(us) ? new Date(us / 1e3).toISOString() : "");

  function refused(what, r) {
    C.show("tenant-error", C.refusal(what, r));
  }

  async function queue() {
    const n = ask("queue");
    const r = await C.api("GET", `/v1/queues/${C.seg(tenant)}`);
    if (n !== asked.queue) return;
    const table = $("queue");
    table.hidden = r.status !== 200 || !r.body;
    if (r.status === 404) {
      $("queue-status").textContent = `${tenant} has no pull queue (queue = true in its [tenants] table).`;
      return;
    }
    if (r.status === 501) {
      $("queue-status").textContent = "This store keeps no pull queue.";
      return;
    }
    if (table.hidden) {
      $("queue-status").textContent = "";
      refused(`Reading the queue of ${tenant}`, r);
      return;
    }
    const q = r.body;
    const age = q.oldest_age_ms === null || q.oldest_age_ms === undefined ? "–" : `${(q.oldest_age_ms / 1e3).toFixed(1)} s`;
    const tr = document.createElement("tr");
    for (const v of [q.depth, q.ready, q.delayed, q.in_flight]) tr.append(C.cell(String(v)));
    tr.append(C.cell(age));
    table.tBodies[0].replaceChildren(tr);
    $("queue-status").textContent = `Receives before a dead letter: ${q.max_receives}.`;
  }

  async function timers() {
    const n = ask("timers");
    const after = timerPages[timerPages.length - 1] || "";
    const prefix = $("prefix").value.trim();
    const q = `?limit=${PAGE}&prefix=${C.seg(prefix)}` + (after ? `&after=${C.seg(after)}` : "");
    const r = await C.api("GET", `/v1/timers/${C.seg(tenant)}${q}`);
    if (n !== asked.timers) return;
    let list = [];
    if (r.status === 200 && r.body && Array.isArray(r.body.timers)) list = r.body.timers;
    else refused(`Listing the timers of ${tenant}`, r);
    timerNext = r.body && typeof r.body.next === "string" ? r.body.next : null;
    $("timers").tBodies[0].replaceChildren(
      ...list.map((t) => {
        const tr = document.createElement("tr");
        tr.dataset.key = t.key;
        tr.append(C.cell(t.key, "text"), C.cell(iso(t.fire_at_us), "text"), C.cell(String(t.version)));
        return tr;
      }),
    );
    $("timers-more").hidden = timerNext === null;
    $("timers-first").hidden = timerPages.length === 0;
    const page = timerPages.length + 1;
    $("timers-status").textContent =
      r.status === 200 ? `Page ${page}: ${list.length} pending timer(s)${prefix ? ` with keys starting ${prefix}` : ""}${after ? `, after ${after}` : ""}.` : "";
  }

  async function schedules() {
    const n = ask("schedules");
    const after = schedulePages[schedulePages.length - 1] || "";
    const q = `?limit=${SCHEDULES}` + (after ? `&after=${C.seg(after)}` : "");
    const r = await C.api("GET", `/v1/schedules/${C.seg(tenant)}${q}`);
    if (n !== asked.schedules) return;
    const body = $("schedules").tBodies[0];
    body.replaceChildren();
    if (r.status === 501) {
      $("schedules-status").textContent = "This store serves no recurring schedules.";
      return;
    }
    if (r.status !== 200 || !r.body || !Array.isArray(r.body.schedules)) {
      $("schedules-status").textContent = "";
      refused(`Listing the schedules of ${tenant}`, r);
      return;
    }
    scheduleNext = typeof r.body.next === "string" ? r.body.next : null;
    $("schedules-more").hidden = scheduleNext === null;
    const list = r.body.schedules;
    $("schedules-status").textContent = `${list.length} schedule(s)${after ? ` after ${after}` : ""}.`;
    const rows = list.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.key = s.key;
      const next = C.cell("…", "text next");
      tr.append(C.cell(s.key, "text"), C.cell(s.paused ? "paused" : "running", "text"));
      tr.append(C.cell(String(s.sequence)), next);
      return [tr, next, s.key];
    });
    body.append(...rows.map(([tr]) => tr));
    for (const [, next, key] of rows) {
      const one = await C.api("GET", `/v1/schedules/${C.seg(tenant)}/${C.seg(key)}?next=${NEXT}`);
      if (n !== asked.schedules) return;
      if (one.status !== 200 || !one.body || !Array.isArray(one.body.next)) {
        next.textContent = C.refusal("reading it", one);
        continue;
      }
      const when = one.body.next.map((o) => o.local || iso(o.occurrence_us));
      next.textContent = when.length ? when.join(", ") : "none left";
    }
  }

  function load() {
    C.show("tenant-error", "");
    queue();
    timers();
    schedules();
  }

  $("prefix-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    timerPages = [];
    C.show("tenant-error", "");
    timers();
  });
  $("timers-more").addEventListener("click", () => {
    timerPages.push(timerNext);
    timers();
  });
  $("timers-first").addEventListener("click", () => {
    timerPages = [];
    timers();
  });
  $("schedules-more").addEventListener("click", () => {
    schedulePages.push(scheduleNext);
    schedules();
  });

  C.page("tenant", {
    section: "tenant-page",
    enter(name) {
      tenant = name || C.ownTenant();
      $("tenant-title").textContent = tenant ? `Tenant ${tenant}` : "Tenant";
      $("tenant-dead").href = "#dead/" + C.seg(tenant);
      $("prefix").value = "";
      timerPages = [];
      schedulePages = [];
      for (const id of ["timers", "schedules", "queue"]) $(id).tBodies[0].replaceChildren();
      if (!tenant) {
        C.show("tenant-error", "No tenant named: open one from Tenants.");
        return;
      }
      load();
    },
  });
})();
