#include "controller/admin/admin_page.h"

namespace kwd::controller_admin {

// Fetches the absolute /admin/api/state (the page is served at /admin and
// /admin/); every value from the cluster is set with textContent.
const std::string_view kControllerAdminPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kwd-controller admin</title>
<link rel="icon" type="image/svg+xml" href="data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxNiAxNiI+PHJlY3Qgd2lkdGg9IjE2IiBoZWlnaHQ9IjE2IiByeD0iMyIgZmlsbD0iIzFmNGU3OSIvPjxwYXRoIGQ9Ik00IDN2MTBNNCA4bDYtNU00IDhsNiA1IiBzdHJva2U9IiNmZmYiIHN0cm9rZS13aWR0aD0iMiIgZmlsbD0ibm9uZSIvPjwvc3ZnPg==">
<style>
body { font: 13px system-ui, sans-serif; margin: 1em 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .3em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .2em 0 .6em; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; font-weight: 600; }
.ok { color: #0a6b0a; font-weight: 600; }
.bad { color: #b00020; font-weight: 600; }
.muted { color: #666; }
#header { display: flex; flex-wrap: wrap; gap: .3em 1.5em; }
ul.conditions { margin: 0; padding-left: 1.2em; }
</style>
</head>
<body>
<h1>kwd-controller</h1>
<div id="header" class="muted">loading&hellip;</div>
<div id="status" class="bad"></div>
<h2>Connected proxies</h2>
<div id="proxies"></div>
<h2>Objects and their conditions</h2>
<div id="objects"></div>
<h2>Problems in the latest compile</h2>
<div id="problems"></div>
<script>
"use strict";
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function table(headers) {
  const t = el("table");
  const tr = el("tr");
  for (const h of headers) tr.appendChild(el("th", h));
  t.appendChild(tr);
  return t;
}
function row(t, cells) {
  const tr = el("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = el("td"); td.appendChild(c); tr.appendChild(td); }
    else if (c && typeof c === "object") tr.appendChild(el("td", c.text, c.cls));
    else tr.appendChild(el("td", c));
  }
  t.appendChild(tr);
  return tr;
}
function short(v) { return v ? v.slice(0, 16) : "-"; }
function render(state) {
  const header = document.getElementById("header");
  header.replaceChildren();
  const snap = state.snapshot;
  header.appendChild(el("span", "snapshot " + (snap ? short(snap.version) : "(none yet)")));
  if (snap) {
    header.appendChild(el("span", "published " + (snap.published_at || "-")));
    header.appendChild(el("span", snap.groups + " groups, " + snap.virtual_hosts + " virtual hosts"));
  }
  header.appendChild(el("span", state.ready ? "ready" : "NOT READY", state.ready ? "ok" : "bad"));
  header.appendChild(el("span", "refreshed " + new Date().toLocaleTimeString()));

  const proxies = document.getElementById("proxies");
  proxies.replaceChildren();
  if (!state.proxies.length) proxies.appendChild(el("p", "no proxy connected", "muted"));
  else {
    const t = table(["node id", "replica", "address", "connected since", "version ACKed", "last NACK"]);
    t.id = "proxy-table";
    for (const p of state.proxies) {
      row(t, [p.node_id, p.replica === "this" ? "this controller" : "another replica",
        p.peer || "-", p.connected_since || "-",
        {text: short(p.acked_version) + (p.current ? " (current)" : "") +
               (p.unresponsive ? " (not answering: not counted for Programmed)" : ""),
         cls: p.current && !p.unresponsive ? "ok" : "bad"},
        p.last_nack ? {text: short(p.last_nack.version) + ": " + p.last_nack.error, cls: "bad"} : "none"]);
    }
    proxies.appendChild(t);
  }

  const objects = document.getElementById("objects");
  objects.replaceChildren();
  if (!state.objects.length) objects.appendChild(el("p", "no objects", "muted"));
  else {
    const t = table(["kind", "namespace", "name", "generation", "ready servers", "conditions"]);
    t.id = "object-table";
    for (const o of state.objects) {
      const ul = el("ul", null, "conditions");
      for (const c of o.conditions) {
        const li = el("li");
        li.appendChild(el("span", c.type + "=" + c.status, c.status === "True" ? "ok" : "bad"));
        li.appendChild(el("span", " " + c.reason + (c.message ? ": " + c.message : "")));
        ul.appendChild(li);
      }
      row(t, [o.kind, o.namespace, o.name, o.generation,
        o.ready_servers === null ? "-" : o.ready_servers, ul]);
    }
    objects.appendChild(t);
  }

  const problems = document.getElementById("problems");
  problems.replaceChildren();
  if (!state.compile_problems.length) problems.appendChild(el("p", "none", "muted"));
  else {
    const t = table(["object", "condition", "reason", "message"]);
    for (const p of state.compile_problems) {
      row(t, [p.kind + " " + p.namespace + "/" + p.name, p.type, p.reason, p.message]);
    }
    problems.appendChild(t);
  }
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
refresh();
setInterval(refresh, 3000);
</script>
</body>
</html>
)html";

}  // namespace kwd::controller_admin
