#include "dataplane/admin/admin_page.h"

namespace kwd::admin {

const std::string_view kAdminPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kwd-proxy admin</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
table { border-collapse: collapse; min-width: 60%; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.up { color: #0a6b0a; font-weight: 600; }
.down { color: #b00020; font-weight: 600; }
.next { background: #fff7d6; }
#meta, .muted { color: #666; }
input { font: inherit; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; }
</style>
</head>
<body>
<h1>kwd-proxy</h1>
<div id="meta">loading&hellip;</div>
<div id="groups"></div>
<h2>Explain a request</h2>
<form id="explain">
  URL <input id="url" size="50" value="/sap/bc/gui/sap/its/webgui">
  Host <input id="host" size="20">
  Cookie <input id="cookie" size="30">
  <button>explain</button>
  <span class="muted">(runs on a separate router: live balancing is not disturbed)</span>
</form>
<pre id="decision"></pre>
<script>
"use strict";
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function row(cells, header) {
  const tr = el("tr");
  for (const c of cells) {
    const td = el(header ? "th" : "td", c.text !== undefined ? c.text : c, c.cls);
    tr.appendChild(td);
  }
  return tr;
}
function render(state) {
  document.getElementById("meta").textContent =
    "snapshot " + (state.version ? state.version.slice(0, 16) : "(none)") +
    " \u00b7 " + (state.ready ? "ready" : "NOT READY") +
    " \u00b7 workers " + state.workers_answered + "/" + state.workers +
    " \u00b7 " + new Date().toLocaleTimeString();
  const root = document.getElementById("groups");
  root.replaceChildren();
  for (const g of state.groups) {
    root.appendChild(el("h2", g.key + " (" + g.kind + ", " + g.strategy + ")"));
    root.appendChild(el("div", "next preferred server: " + (g.next_preferred_server || "none") +
      " \u00b7 session table entries: " + g.session_table_entries, "muted"));
    const table = el("table");
    table.appendChild(row(["server", "address", "capacity", "state", "health", "rtt ms",
                           "assigned", "outstanding", "load factor"], true));
    for (const s of g.servers) {
      const tr = row([s.name, s.address + ":" + s.port, {text: s.capacity, cls: "num"}, s.state,
        {text: s.healthy ? "up" : "down", cls: s.healthy ? "up" : "down"},
        {text: s.rtt_ms === null ? "-" : s.rtt_ms.toFixed(2), cls: "num"},
        {text: s.assigned, cls: "num"}, {text: s.outstanding, cls: "num"},
        {text: s.load_factor.toFixed(2), cls: "num"}]);
      if (s.name === g.next_preferred_server) tr.className = "next";
      table.appendChild(tr);
    }
    root.appendChild(table);
  }
}
async function refresh() {
  try {
    const r = await fetch("api/state", {cache: "no-store"});
    render(await r.json());
  } catch (e) {
    document.getElementById("meta").textContent = "cannot read state: " + e;
  }
}
document.getElementById("explain").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = new URLSearchParams({url: document.getElementById("url").value});
  const host = document.getElementById("host").value;
  const cookie = document.getElementById("cookie").value;
  if (host) q.set("host", host);
  if (cookie) q.append("header", "Cookie: " + cookie);
  const r = await fetch("api/explain?" + q.toString(), {cache: "no-store"});
  document.getElementById("decision").textContent = JSON.stringify(await r.json(), null, 2);
});
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)html";

}  // namespace kwd::admin
