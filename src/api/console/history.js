// The console's history page: a tenant and a key, then that key's recent fires from
// `GET /v1/history/{tenant}?key=K`, read with the token the console's sign-in kept in this
// tab. Text from the server goes into the page as text, never as HTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const TOKEN = "punctual.console.token";
  const TENANT = "punctual.console.tenant";
  const seg = encodeURIComponent;

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    td.className = "text";
    return td;
  }

  function time(us) {
    return new Date(us / 1000).toISOString();
  }

  // Each attempt: its status, or its error's class.
  function attempts(list) {
    if (list.length === 0) return "–";
    return list.map((a) => (a.status !== null ? String(a.status) : a.error)).join(", ");
  }

  async function load(ev) {
    ev.preventDefault();
    const tenant = $("history-tenant").value.trim();
    const key = $("history-key").value.trim();
    if (!tenant || !key) return;
    sessionStorage.setItem(TENANT, tenant);
    const token = sessionStorage.getItem(TOKEN);
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const path = `/v1/history/${seg(tenant)}?key=${seg(key)}&limit=1000`;
    const rows = $("history-entries").tBodies[0];
    rows.replaceChildren();
    const err = $("history-error");
    let status = 0;
    let body = null;
    try {
      const r = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
      status = r.status;
      body = await r.json().catch(() => null);
    } catch (e) {
      body = { error: { code: "unreachable", message: String(e) } };
    }
    if (status !== 200 || !body || !Array.isArray(body.entries)) {
      const e = body && body.error;
      err.textContent = `Reading the history of ${key}: ${status} ${e ? e.code + ": " + e.message : ""}`;
      err.hidden = false;
      $("history-status").textContent = "";
      return;
    }
    err.hidden = true;
    for (const e of body.entries) {
      const tr = document.createElement("tr");
      tr.append(
        cell(String(e.version)),
        cell(time(e.fire_at_us)),
        cell(time(e.fired_at_us)),
        cell(`${(e.lateness_us / 1000).toFixed(3)} ms`),
        cell(e.outcome),
        cell(attempts(e.attempts)),
      );
      rows.append(tr);
    }
    $("history-status").textContent = `${body.entries.length} fire(s) of ${key}, newest first`;
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("history-signin").hidden = sessionStorage.getItem(TOKEN) !== null;
    $("history-tenant").value = sessionStorage.getItem(TENANT) || "";
    $("history-form").addEventListener("submit", load);
  });
})();
