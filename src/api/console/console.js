// The operator console. Every request goes through punctual's public API with the token the
// operator gave (`Authorization: Bearer …`), so the page can do nothing that token's client
// cannot: the overview reads `/metrics`, the dead-letter page `/v1/dead/{tenant}` and
// `/v1/timers/{tenant}/{key}`. Text from the server goes into the page as text, never as HTML.
// Other pages, each in a file of its own, register with `PunctualConsole.page` and use the
// helpers it exports; the route `#name/arg` shows the section `name` and calls its `enter(arg)`.
"use strict";

(() => {
  const M = PunctualMetrics;
  const $ = (id) => document.getElementById(id);
  const TOKEN = "punctual.console.token";
  const TENANT = "punctual.console.tenant";
  const OWN = "punctual.console.own"; // the tenant named at sign-in, for a tenant's token
  const POLL_MS = 2000;
  const WINDOW = 31; // readings kept: the last minute at one every 2 s
  const CHART_POINTS = 90;
  const PAGE = 100;

  let readings = []; // [{at (ms), shards}]
  let chart = []; // p99 of all shards between consecutive readings (s), or null
  let poll = null;
  let scraping = false; // a slow /metrics is not asked again while it answers

  // ---- the API --------------------------------------------------------------------------

  async function api(method, path) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = "Bearer " + token;
    let r;
    try {
      r = await fetch(path, { method, headers, cache: "no-store", credentials: "omit" });
    } catch (e) {
      return { status: 0, text: String(e), body: null };
    }
    const text = await r.text();
    let body = null;
    if ((r.headers.get("content-type") || "").startsWith("application/json")) {
      try {
        body = JSON.parse(text);
      } catch (_) {
        body = null;
      }
    }
    return { status: r.status, text, body };
  }

  // What a refused request says, for the operator.
  function refusal(what, r) {
    if (r.status === 0) return `${what}: the server did not answer (${r.text})`;
    const e = r.body && r.body.error;
    const why = e ? `${e.code}: ${e.message}` : r.text.slice(0, 200);
    return `${what}: ${r.status} ${why}`;
  }

  const seg = encodeURIComponent;

  // ---- small DOM helpers ----------------------------------------------------------------

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function show(id, text) {
    const el = $(id);
    el.textContent = text || "";
    el.hidden = !text;
  }

  // Seconds for people: µs, ms or s; a bucket's bound, so "≤".
  function duration(s, buckets) {
    if (s === null) return "–";
    if (!Number.isFinite(s)) return "> " + duration(M.largestFinite(buckets), buckets).slice(2);
    if (s < 1e-3) return "≤ " + +(s * 1e6).toPrecision(3) + " µs";
    if (s < 1) return "≤ " + +(s * 1e3).toPrecision(3) + " ms";
    return "≤ " + +s.toPrecision(3) + " s";
  }

  // ---- sign in, pages -------------------------------------------------------------------

  function signedIn() {
    return sessionStorage.getItem(TOKEN) !== null;
  }

  // Pages from other files: name -> {enter(arg), leave(), section (its id, when not the name)}.
  const views = {};

  function route() {
    const [hash, ...rest] = location.hash.slice(1).split("/");
    const arg = rest.length ? decodeURIComponent(rest.join("/")) : "";
    const known = ["overview", "dead", ...Object.keys(views)];
    const page = signedIn() ? (known.includes(hash) ? hash : "overview") : "login";
    const section = (name) => (views[name] && views[name].section) || name;
    for (const id of ["login", ...known]) $(section(id)).hidden = id !== page;
    $("nav").hidden = page === "login";
    for (const a of document.querySelectorAll("#nav a[data-page]")) {
      const current = a.dataset.page === page || (page === "tenant" && a.dataset.page === "tenants");
      a.classList.toggle("current", current);
      if (current) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    clearInterval(poll);
    poll = null;
    for (const v of Object.values(views)) if (v.leave) v.leave();
    if (views[page]) {
      views[page].enter(arg);
    } else if (page === "overview") {
      readings = [];
      chart = [];
      scrape();
      poll = setInterval(scrape, POLL_MS);
    } else if (page === "dead") {
      if (arg) sessionStorage.setItem(TENANT, arg);
      $("tenant").value = sessionStorage.getItem(TENANT) || sessionStorage.getItem(OWN) || "";
      if ($("tenant").value) list();
    } else {
      $("token").focus();
    }
  }

  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN, $("token").value.trim());
    const own = $("own-tenant").value.trim();
    if (own) sessionStorage.setItem(OWN, own);
    else sessionStorage.removeItem(OWN);
    $("token").value = "";
    $("own-tenant").value = "";
    route();
  });

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(TENANT);
    sessionStorage.removeItem(OWN);
    location.hash = "";
    route();
  });

  window.addEventListener("hashchange", route);

  // ---- overview -------------------------------------------------------------------------

  function bound() {
    const ms = Number($("bound").value);
    return Number.isFinite(ms) && ms > 0 ? ms / 1e3 : 5e-3;
  }

  $("bound-form").addEventListener("submit", (ev) => ev.preventDefault());
  $("bound").addEventListener("input", () => render());

  async function scrape() {
    if (scraping) return;
    scraping = true;
    const r = await api("GET", "/metrics");
    scraping = false;
    if (r.status !== 200) {
      const hint =
        r.status === 401 ? " (the overview needs the metrics token; a tenant's token can use Dead letters)" : "";
      show("overview-error", refusal("Reading /metrics", r) + hint);
      return;
    }
    show("overview-error", "");
    readings.push({ at: Date.now(), shards: M.shards(M.parse(r.text)) });
    if (readings.length > WINDOW) readings.shift();
    if (readings.length >= 2) {
      const [a, b] = readings.slice(-2);
      const d = M.since(a.shards.all, b.shards.all);
      chart.push(M.quantile(d.buckets, 0.99));
      if (chart.length > CHART_POINTS) chart.shift();
    }
    render();
  }

  function render() {
    if (readings.length === 0) return;
    const first = readings[0];
    const last = readings[readings.length - 1];
    const seconds = (last.at - first.at) / 1e3;
    const names = Object.keys(last.shards).filter((s) => s !== "all");
    names.sort((a, b) => Number(a) - Number(b));
    const body = $("shards").tBodies[0];
    body.replaceChildren();
    let all = null;
    for (const name of ["all", ...names]) {
      const d = M.since(readings.length > 1 ? first.shards[name] : null, last.shards[name]);
      if (name === "all") all = d;
      body.append(row(name, d, seconds));
    }
    $("window").textContent =
      readings.length > 1
        ? `Fires and lateness over the last ${Math.round(seconds)} s, read from /metrics every ${POLL_MS / 1e3} s; pending timers now.`
        : "Fires and lateness since the server started (the next readings narrow this to the last minute); pending timers now.";
    verdict(all);
    draw();
  }

  function row(name, d, seconds) {
    const tr = document.createElement("tr");
    tr.dataset.shard = name;
    if (name === "all") tr.className = "all";
    const rate = seconds > 0 ? (d.fired / seconds).toFixed(1) : "–";
    tr.append(cell(name === "all" ? "all" : name, "text"), cell(rate), cell(String(d.pending)));
    tr.append(cell(String(d.fired)));
    for (const q of [0.5, 0.99, 0.999]) {
      const v = M.quantile(d.buckets, q);
      tr.append(cell(duration(v, d.buckets), v !== null && v > bound() ? "over" : ""));
    }
    const top = M.max(d.buckets);
    tr.append(cell(duration(top, d.buckets), top !== null && top > bound() ? "over" : ""));
    return tr;
  }

  function verdict(all) {
    const el = $("verdict");
    const p99 = all ? M.quantile(all.buckets, 0.99) : null;
    const limit = duration(bound(), []).slice(2);
    if (p99 === null) {
      el.className = "verdict";
      el.textContent = `No fires in this window: nothing to hold to the ${limit} bound`;
    } else if (p99 <= bound()) {
      el.className = "verdict ok";
      el.textContent = `Keeping its bound: lateness p99 ${duration(p99, all.buckets)}, bound ${limit}`;
    } else {
      el.className = "verdict bad";
      el.textContent = `Over its bound: lateness p99 ${duration(p99, all.buckets)}, bound ${limit}`;
    }
  }

  // The p99 of each interval between readings, against the bound, as SVG drawn here.
  function draw() {
    const svg = $("chart");
    const NS = "http://www.w3.org/2000/svg";
    const W = 720, H = 180, L = 70, R = 10, T = 10, B = 20;
    const add = (tag, attrs, text) => {
      const el = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
      if (text !== undefined) el.textContent = text;
      svg.append(el);
      return el;
    };
    svg.replaceChildren();
    const finite = chart.filter((v) => v !== null && Number.isFinite(v));
    const top = Math.max(bound() * 1.5, ...finite);
    const y = (v) => T + (H - T - B) * (1 - Math.min(v, top) / top);
    const x = (i) => L + ((W - L - R) * i) / (CHART_POINTS - 1);
    add("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B });
    add("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B });
    add("line", { class: "bound", x1: L, y1: y(bound()), x2: W - R, y2: y(bound()) });
    add("text", { x: 4, y: y(bound()) + 4 }, "bound " + duration(bound(), []).slice(2));
    add("text", { x: 4, y: T + 8 }, duration(top, []).slice(2));
    add("text", { x: 4, y: H - B }, "0");
    add("text", { x: L, y: H - 4 }, `every ${POLL_MS / 1e3} s, the last ${chart.length}`);
    let path = "";
    chart.forEach((v, i) => {
      if (v === null) return;
      const [px, py] = [x(i).toFixed(1), y(Number.isFinite(v) ? v : top).toFixed(1)];
      path += `${path && chart[i - 1] !== null ? "L" : "M"}${px},${py} `;
      add("circle", { class: "point", cx: px, cy: py, r: 2.5 });
    });
    if (path) add("path", { class: "line", d: path.trim() });
  }

  // ---- dead letters ---------------------------------------------------------------------

  let letters = []; // the listed page
  let listing = 0; // the latest listing asked for: an earlier one's answer is dropped
  let pages = []; // the `after` key of each page so far ("" for the first)

  function tenant() {
    return $("tenant").value.trim();
  }

  $("tenant-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TENANT, tenant());
    pages = [];
    list();
  });

  $("more").addEventListener("click", () => {
    pages.push(letters[letters.length - 1].key);
    list();
  });

  async function list() {
    const t = tenant();
    if (!t) return;
    const after = pages.length ? pages[pages.length - 1] : "";
    const q = `?limit=${PAGE}` + (after ? `&after=${seg(after)}` : "");
    const n = (listing += 1);
    const r = await api("GET", `/v1/dead/${seg(t)}${q}`);
    if (n !== listing) return;
    letters = [];
    if (r.status !== 200 || !r.body || !Array.isArray(r.body.dead)) {
      show("dead-error", refusal(`Listing the dead letters of ${t}`, r));
    } else {
      show("dead-error", "");
      letters = r.body.dead;
    }
    const body = $("letters").tBodies[0];
    body.replaceChildren(...letters.map(letterRow));
    $("redrive-all").disabled = letters.length === 0;
    $("more").hidden = letters.length < PAGE;
    $("dead-status").textContent =
      r.status === 200 ? `${letters.length} dead letter(s) of ${t}${after ? " after " + after : ""}` : "";
  }

  function letterRow(l) {
    const tr = document.createElement("tr");
    tr.dataset.key = l.key;
    const error = l.last_status ? `HTTP ${l.last_status}` : l.last_error || "";
    const due = Number.isFinite(l.fire_at_us) ? new Date(l.fire_at_us / 1e3).toISOString() : "";
    const url = l.callback && l.callback.url ? l.callback.url : "";
    tr.append(cell(l.key, "text key"), cell(String(l.attempts)), cell(error, "text"));
    tr.append(cell(due, "text"), cell(url, "text url"));
    const actions = document.createElement("td");
    actions.className = "text";
    const again = document.createElement("button");
    again.type = "button";
    again.className = "redrive";
    again.textContent = "Re-drive";
    again.addEventListener("click", async () => {
      // A refused re-drive leaves its refusal shown: the list is as it was.
      if (await redrive(l.key)) list();
    });
    const drop = document.createElement("button");
    drop.type = "button";
    drop.className = "discard";
    drop.textContent = "Discard";
    drop.addEventListener("click", () => discard(l.key));
    actions.append(again, " ", drop);
    tr.append(actions);
    return tr;
  }

  async function redrive(key) {
    const t = tenant();
    const r = await api("POST", `/v1/dead/${seg(t)}/${seg(key)}/retry`);
    if (r.status !== 202) {
      show("dead-error", refusal(`Re-driving ${key}`, r));
      return false;
    }
    watch(t, key);
    return true;
  }

  async function discard(key) {
    const r = await api("DELETE", `/v1/dead/${seg(tenant())}/${seg(key)}`);
    if (r.status !== 204) show("dead-error", refusal(`Discarding ${key}`, r));
    else $("dead-status").textContent = `Discarded ${key}`;
    list();
  }

  $("redrive-all").addEventListener("click", () => {
    $("confirm-text").textContent = `Re-drive all ${letters.length} listed dead letter(s) of ${tenant()}? Each is delivered again now, with a fresh attempt budget.`;
    $("confirm").hidden = false;
  });
  $("confirm-no").addEventListener("click", () => ($("confirm").hidden = true));
  $("confirm-yes").addEventListener("click", async () => {
    $("confirm").hidden = true;
    const keys = letters.map((l) => l.key);
    let done = 0;
    for (const key of keys) if (await redrive(key)) done += 1;
    await list();
    $("dead-status").textContent = `Re-drove ${done} of ${keys.length} dead letter(s)`;
  });

  // A re-driven letter's row in "Re-driven here": pending while its delivery is under way,
  // then delivered (not pending, no dead letter) or dead again.
  async function watch(t, key) {
    const tr = document.createElement("tr");
    tr.dataset.key = key;
    const state = cell("re-driven, delivering", "text state");
    tr.append(cell(`${t}/${key}`, "text"), state);
    $("redriven").tBodies[0].prepend(tr);
    for (let i = 0; i < 60; i += 1) {
      await new Promise((done) => setTimeout(done, 1000));
      const r = await api("GET", `/v1/timers/${seg(t)}/${seg(key)}`);
      if (r.status === 200) continue;
      if (r.status !== 404) {
        state.textContent = refusal("reading its timer", r);
        return;
      }
      const dead = await isDead(t, key);
      state.textContent = dead === null ? "not pending; the dead letters could not be read" : dead ? "dead again" : "delivered";
      return;
    }
    state.textContent = "still delivering after a minute";
  }

  // Whether `key` is a dead letter of `t` (null when the list cannot be read): the list is in
  // key order, so the pages stop at the first key beyond it.
  async function isDead(t, key) {
    let after = "";
    for (;;) {
      const r = await api("GET", `/v1/dead/${seg(t)}?limit=1000` + (after ? `&after=${seg(after)}` : ""));
      if (r.status !== 200 || !r.body || !Array.isArray(r.body.dead)) return null;
      const keys = r.body.dead.map((l) => l.key);
      if (keys.includes(key)) return true;
      if (keys.length < 1000 || keys[keys.length - 1] > key) return false;
      after = keys[keys.length - 1];
    }
  }

  // What the other pages' files use.
  window.PunctualConsole = {
    api,
    refusal,
    cell,
    show,
    seg,
    duration,
    ownTenant: () => sessionStorage.getItem(OWN) || "",
    page: (name, v) => {
      views[name] = v;
    },
  };

  // Deferred scripts run in order before this event: every page has registered by then.
  document.addEventListener("DOMContentLoaded", route);
})();
