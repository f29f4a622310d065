#include "dataplane/admin/admin_page.h"

namespace kwd::admin {

// Every URL the page fetches is absolute ("/admin/api/..."): the page is
// served at /admin and /admin/, and a relative "api/state" resolves to
// "/api/state" from the first. Everything from the proxy or from a request
// (names, hosts, paths, errors) is put into the page with textContent or as
// an attribute value, never parsed as HTML. The favicon is inline (base64
// SVG), so the browser fetches nothing else.
const std::string_view kAdminPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kwd-proxy admin</title>
<link rel="icon" type="image/svg+xml" href="data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxNiAxNiI+PHJlY3Qgd2lkdGg9IjE2IiBoZWlnaHQ9IjE2IiByeD0iMyIgZmlsbD0iIzFmNGU3OSIvPjxwYXRoIGQ9Ik00IDN2MTBNNCA4bDYtNU00IDhsNiA1IiBzdHJva2U9IiNmZmYiIHN0cm9rZS13aWR0aD0iMiIgZmlsbD0ibm9uZSIvPjwvc3ZnPg==">
<style>
body { font: 13px system-ui, sans-serif; margin: 1em 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .3em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; margin: 1em 0 .2em; }
table { border-collapse: collapse; margin: .2em 0 .6em; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.up, .ok { color: #0a6b0a; font-weight: 600; }
.down, .bad { color: #b00020; font-weight: 600; }
.draining { color: #8a5a00; font-weight: 600; }
tr.next { background: #fff7d6; }
.muted { color: #666; }
#header { display: flex; flex-wrap: wrap; gap: .3em 1.5em; }
#header span b { font-weight: 600; }
input, textarea, button { font: inherit; }
textarea { width: 100%; max-width: 40em; }
form#explain label { display: block; margin: .3em 0; }
form#explain input[name=url] { width: 100%; max-width: 40em; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; max-width: 100%; }
#explain-result ol { padding-left: 1.5em; }
#explain-result li { margin: .3em 0; }
.actions button { margin-right: .3em; }
.scroll { overflow-x: auto; }
</style>
</head>
<body>
<h1>kwd-proxy</h1>
<div id="header" class="muted">loading&hellip;</div>
<div id="status" class="bad"></div>
<p>
  <label>Admin token (for drain/undrain; kept in this tab only)
  <input id="token" type="password" autocomplete="off" size="30"></label>
  <span id="action-result" class="muted"></span>
</p>
<h2>Logon groups and servers</h2>
<div id="groups"></div>
<h2>URL mapping (evaluation order)</h2>
<div id="url-mapping"></div>
<h2>Permission table (first match wins)</h2>
<div id="permissions"></div>
<h2>Recent errors the proxy answered itself</h2>
<div id="recent-errors"></div>
<h2>Explain a request</h2>
<form id="explain">
  <label>URL <input name="url" value="/sap/bc/gui/sap/its/webgui"></label>
  <label>Host <input name="host" size="30"></label>
  <label>Headers (one <code>Name: value</code> per line)<br>
  <textarea name="header" rows="3" placeholder="Cookie: saplb_*=(erp1_ERP_00)00"></textarea></label>
  <button type="submit">explain</button>
  <span class="muted">(runs on a separate router: live balancing and sessions are not changed)</span>
</form>
<div id="explain-result"></div>
<script>
"use strict";
let lastState = null;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function cell(tr, text, cls, title) {
  const td = el("td", text, cls);
  if (title) td.title = title;
  tr.appendChild(td);
  return td;
}
function headRow(table, names) {
  const tr = el("tr");
  for (const n of names) tr.appendChild(el("th", n));
  table.appendChild(tr);
}
function ago(iso) {
  if (!iso) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 120) return s + "s ago";
  if (s < 7200) return Math.round(s / 60) + "m ago";
  return Math.round(s / 3600) + "h ago";
}
function duration(seconds) {
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}
function fixed(n, digits) { return n === null || n === undefined ? "-" : Number(n).toFixed(digits); }
function token() { return document.getElementById("token").value.trim(); }

function renderHeader(state) {
  const header = document.getElementById("header");
  header.replaceChildren();
  const add = (label, value, cls) => {
    const span = el("span");
    span.appendChild(el("b", label + ": "));
    span.appendChild(el("span", value, cls));
    header.appendChild(span);
  };
  add("snapshot", state.version ? state.version.slice(0, 16) : "(none)");
  add("ready", state.ready ? "yes" : "NO", state.ready ? "ok" : "bad");
  if (state.node_id) add("node", state.node_id);
  const src = state.snapshot_source;
  if (src) {
    add("source", src.kind + (src.target ? " " + src.target : ""));
    if (src.connected !== null) {
      add("controller", src.connected ? "connected" : "disconnected", src.connected ? "ok" : "bad");
    }
    const ack = src.last_applied;
    add("last ACK", ack ? ack.version.slice(0, 16) + " (" + ago(ack.at) + ")" : "none");
    const nack = src.last_rejected;
    add("last NACK", nack ? nack.version.slice(0, 16) + " (" + ago(nack.at) + "): " + nack.error : "none",
        nack ? "bad" : undefined);
  }
  add("uptime", duration(state.uptime_seconds));
  add("workers", state.workers_answered + "/" + state.workers);
  const conns = state.connections;
  if (conns) {
    add("connections", "HTTP/1.1 " + conns.http1 + " \u00b7 HTTP/2 " + conns.http2 + " (" +
        conns.http2_streams + " streams)");
  }
  add("actions", state.actions_enabled ? "enabled (token)" : "read-only");
  add("refreshed", new Date().toLocaleTimeString());
}

function classes(r) {
  return "1xx " + r["1xx"] + " \u00b7 2xx " + r["2xx"] + " \u00b7 3xx " + r["3xx"] +
         " \u00b7 4xx " + r["4xx"] + " \u00b7 5xx " + r["5xx"] + " \u00b7 none " + r.none;
}

function renderGroups(state) {
  const root = document.getElementById("groups");
  root.replaceChildren();
  if (!state.groups.length) root.appendChild(el("p", "no logon groups (no snapshot applied?)", "muted"));
  const withActions = token() !== "";
  for (const g of state.groups) {
    const section = el("section");
    section.className = "group";
    section.setAttribute("data-group", g.key);
    section.appendChild(el("h3", g.key));
    section.appendChild(el("div", "kind " + g.kind + " \u00b7 strategy " + g.strategy +
      " \u00b7 next preferred server: " + (g.next_preferred_server || "none") +
      " \u00b7 session table: " + g.session_table_entries + " entries" +
      " \u00b7 sticky routed " + g.sticky_routed + ", lost " + g.sticky_lost +
      " \u00b7 health check " + g.health_check.protocol + " " + g.health_check.path +
      (g.health_check.server_name ? " (SNI " + g.health_check.server_name + ")" : ""), "muted"));
    const pt = g.passthrough;
    if (pt) {
      const div = el("div", "TLS passthrough for " +
        pt.hosts.map((h) => h === null ? "* (any other host)" : h).join(", ") +
        " \u00b7 connections " + pt.connections + " \u00b7 bytes in " + pt.bytes_in +
        ", out " + pt.bytes_out + " \u00b7 errors " + pt.errors, "passthrough");
      div.setAttribute("data-connections", pt.connections);
      div.setAttribute("data-errors", pt.errors);
      section.appendChild(div);
    }
    const wrap = el("div", null, "scroll");
    const table = el("table");
    headRow(table, ["server", "address", "capacity", "state", "health", "last check",
      "last state change", "RTT ms", "assigned", "outstanding", "load factor", "requests",
      "responses by class", "errors", "req/s (1 min)", "err/s (1 min)"].concat(withActions ? ["action"] : []));
    for (const s of g.servers) {
      const tr = el("tr");
      tr.className = "server" + (s.name === g.next_preferred_server ? " next" : "");
      tr.setAttribute("data-server", s.name);
      cell(tr, s.name);
      cell(tr, s.address + ":" + s.port);
      cell(tr, s.capacity, "num");
      cell(tr, s.state + (s.local_drain ? " (local)" : ""), s.state === "draining" ? "draining state" : "state",
           s.local_drain ? "drained on this proxy from the admin port" : "from the snapshot");
      cell(tr, s.healthy ? "up" : "down", s.healthy ? "up" : "down");
      cell(tr, s.last_check ? ago(s.last_check) + " " + (s.last_check_result || "") : "never", null,
           s.last_check || "");
      cell(tr, ago(s.last_state_change), null, s.last_state_change || "");
      cell(tr, fixed(s.rtt_ms, 2), "num");
      cell(tr, s.assigned, "num");
      cell(tr, s.outstanding, "num");
      cell(tr, fixed(s.load_factor, 2), "num");
      cell(tr, s.requests, "num requests");
      cell(tr, classes(s.responses));
      cell(tr, s.errors, "num errors");
      cell(tr, fixed(s.requests_per_second, 2), "num");
      cell(tr, fixed(s.errors_per_second, 2), "num");
      if (withActions) {
        const td = cell(tr, null, "actions");
        const drain = el("button", s.local_drain ? "undrain" : "drain", s.local_drain ? "undrain" : "drain");
        drain.type = "button";
        drain.addEventListener("click", () => act(s.local_drain ? "undrain" : "drain", g.key, s.name));
        td.appendChild(drain);
      }
      table.appendChild(tr);
    }
    wrap.appendChild(table);
    section.appendChild(wrap);
    root.appendChild(section);
  }
}

function renderMapping(state) {
  const root = document.getElementById("url-mapping");
  const perms = document.getElementById("permissions");
  root.replaceChildren();
  perms.replaceChildren();
  for (const h of state.url_mapping) {
    const title = "host " + (h.host === null ? "* (any)" : h.host) + (h.source ? " \u00b7 UrlMapping " + h.source : "");
    root.appendChild(el("h3", title));
    if (h.passthrough_group) {
      const p = el("p", "TLS passthrough (by SNI) \u2192 " + h.passthrough_group, "passthrough-group");
      p.setAttribute("data-group", h.passthrough_group);
      root.appendChild(p);
    }
    const table = el("table");
    table.className = "rules";
    headRow(table, ["#", "prefix", "kind", "logon group"]);
    let i = 1;
    for (const r of h.rules) {
      const tr = el("tr");
      cell(tr, i++, "num"); cell(tr, r.prefix); cell(tr, r.kind); cell(tr, r.group || "(none)");
      table.appendChild(tr);
    }
    const root_tr = el("tr");
    cell(root_tr, "", "num"); cell(root_tr, "root URL (one \"/\")"); cell(root_tr, h.default_root_handler);
    cell(root_tr, h.default_groups[h.default_root_handler] || "(none)");
    table.appendChild(root_tr);
    const def_tr = el("tr");
    cell(def_tr, "", "num"); cell(def_tr, "anything else"); cell(def_tr, "java");
    cell(def_tr, h.default_groups.java || "(none)");
    table.appendChild(def_tr);
    root.appendChild(table);
    perms.appendChild(el("h3", title));
    if (!h.permissions.length) {
      perms.appendChild(el("p", "no permission table: every URL is permitted", "muted"));
      continue;
    }
    const ptable = el("table");
    ptable.className = "permissions";
    headRow(ptable, ["#", "action", "pattern"]);
    let j = 1;
    for (const p of h.permissions) {
      const tr = el("tr");
      const action = p.secure_action === "redirect" ? "secure (redirect to https)" : p.action;
      cell(tr, j++, "num"); cell(tr, action, p.action === "deny" ? "bad" : null); cell(tr, p.pattern);
      ptable.appendChild(tr);
    }
    perms.appendChild(ptable);
  }
  if (!state.url_mapping.length) root.appendChild(el("p", "no URL mapping", "muted"));
}

function renderErrors(state) {
  const root = document.getElementById("recent-errors");
  root.replaceChildren();
  if (!state.recent_errors.length) {
    root.appendChild(el("p", "none", "muted"));
    return;
  }
  const table = el("table");
  headRow(table, ["when", "status", "code", "reason", "group", "detail"]);
  for (const e of state.recent_errors) {
    const tr = el("tr");
    cell(tr, ago(e.at), null, e.at); cell(tr, e.status, "num bad"); cell(tr, e.code);
    cell(tr, e.reason); cell(tr, e.group || "-"); cell(tr, e.detail);
    table.appendChild(tr);
  }
  root.appendChild(table);
}

function render(state) {
  lastState = state;
  renderHeader(state);
  renderGroups(state);
  renderMapping(state);
  renderErrors(state);
}

async function refresh() {
  try {
    const r = await fetch("/admin/api/state", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    document.getElementById("status").textContent = "";
  } catch (e) {
    document.getElementById("status").textContent = "cannot read state: " + e.message;
  }
}

async function act(action, group, server) {
  const out = document.getElementById("action-result");
  const q = new URLSearchParams({group: group, server: server});
  try {
    const r = await fetch("/admin/api/servers/" + action + "?" + q.toString(),
      {method: "POST", cache: "no-store", headers: {"Authorization": "Bearer " + token()}});
    const body = await r.json();
    out.textContent = r.ok ? action + " " + group + " " + server + ": now " + body.state +
                             (body.local_drain ? " (local)" : "")
                           : action + " refused (" + r.status + "): " + body.error;
    out.className = r.ok ? "ok" : "bad";
  } catch (e) {
    out.textContent = action + " failed: " + e.message;
    out.className = "bad";
  }
  refresh();
}

function renderExplain(answer, status) {
  const root = document.getElementById("explain-result");
  root.replaceChildren();
  if (status !== 200) {
    root.appendChild(el("p", "error " + status + ": " + (answer.error || ""), "bad"));
    return;
  }
  root.appendChild(el("p", "server: " + (answer.server || "none") + " \u00b7 reason: " + answer.reason +
    (answer.status ? " \u00b7 status " + answer.status : "") + " \u00b7 group: " + (answer.group || "none")));
  const ol = el("ol");
  for (const step of answer.steps || []) {
    const li = el("li");
    li.className = "step";
    li.setAttribute("data-step", step.step);
    li.appendChild(el("b", step.step + ": "));
    li.appendChild(el("span", step.text));
    if (step.identifiers) {
      const t = el("table");
      headRow(t, ["identifier", "found", "names server", "honoured", "why not"]);
      for (const id of step.identifiers) {
        const tr = el("tr");
        cell(tr, id.identifier); cell(tr, id.found ? "yes" : "no"); cell(tr, id.names_server || "-");
        cell(tr, id.honoured ? "yes" : "no", id.honoured ? "ok" : null); cell(tr, id.why_not || "");
        t.appendChild(tr);
      }
      li.appendChild(t);
    }
    if (step.candidates) {
      const t = el("table");
      headRow(t, ["server", "capacity", "usable", "why not", "assigned", "outstanding", "load factor", "RTT ms"]);
      for (const c of step.candidates) {
        const tr = el("tr");
        cell(tr, c.server); cell(tr, c.capacity, "num"); cell(tr, c.usable ? "yes" : "no");
        cell(tr, c.why_not || ""); cell(tr, c.assigned, "num"); cell(tr, c.outstanding, "num");
        cell(tr, fixed(c.load_factor, 2), "num"); cell(tr, fixed(c.rtt_ms, 2), "num");
        t.appendChild(tr);
      }
      li.appendChild(t);
    }
    ol.appendChild(li);
  }
  root.appendChild(ol);
  const details = el("details");
  details.appendChild(el("summary", "JSON"));
  details.appendChild(el("pre", JSON.stringify(answer, null, 2)));
  root.appendChild(details);
}

document.getElementById("explain").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const form = ev.target;
  const q = new URLSearchParams();
  q.set("url", form.elements.url.value);
  if (form.elements.host.value) q.set("host", form.elements.host.value);
  for (const line of form.elements.header.value.split("\n")) {
    if (line.trim() !== "") q.append("header", line.trim());
  }
  try {
    const r = await fetch("/admin/api/explain?" + q.toString(), {cache: "no-store"});
    let body = {};
    try { body = await r.json(); } catch (e) { body = {error: "HTTP " + r.status}; }
    renderExplain(body, r.status);
  } catch (e) {
    renderExplain({error: e.message}, 0);
  }
});
document.getElementById("token").addEventListener("input", () => { if (lastState) renderGroups(lastState); });
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)html";

}  // namespace kwd::admin
