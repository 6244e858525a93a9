"""The controller's live page (``/``): a GPU map, the queue with reasons, recent decisions.

Why one static document that fetches ``/state.json``: the page is the same bytes for every
request (no server-side templating of job data, so nothing a Slurm user chose is ever spliced
into HTML), and its script renders the state with ``textContent`` and element attributes
only — never ``innerHTML`` — so a job named ``<img src=x onerror=alert(1)>`` is shown as text.
A strict Content-Security-Policy (:data:`CSP`) backs that up: no script or style but the two
inline blocks below (allowed by their SHA-256, computed here), no outside URL of any kind
(``default-src 'none'``; ``connect-src 'self'`` for the state), no frames, forms or base URL.
The page is self-contained: no fonts, images, libraries or CDNs, so it works on an air-gapped
admin host.
"""

from __future__ import annotations

import base64
import hashlib

REFRESH_MS = 2000
"""How often the page fetches ``/state.json``."""

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1em 2em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}
#status{color:#555}#status.stale{color:#b00;font-weight:bold}
table{border-collapse:collapse;margin:.3em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#eee}
.node td.gpu{width:6em;height:2.2em;font-size:11px;overflow:hidden;white-space:nowrap;
text-overflow:ellipsis;max-width:6em}
td.free{background:#fff;color:#999}
.reason{color:#444;max-width:40em}
.kpi span{display:inline-block;margin-right:1.5em}
"""

_SCRIPT = """
"use strict";
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function colour(id) {
  let h = 0;
  for (const c of String(id)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return "hsl(" + ((h * 137) % 360) + ",65%,78%)";  // golden angle: neighbours differ
}
function row(cells, cls) {
  const tr = el("tr", null, cls);
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}
function fill(id, rows) {
  const body = document.getElementById(id);
  body.replaceChildren(...rows);
}
function shape(m) {
  return Object.entries(m || {}).map(([n, g]) => n + ":" + g).join(" ") || "-";
}
function render(s) {
  const sum = s.summary || {};
  document.getElementById("title").textContent =
    "gpuplan " + s.gpuplan + " \u2014 policy " + s.policy + ", run " + s.run;
  const k = document.getElementById("kpi");
  k.replaceChildren(
    el("span", "running " + sum.running), el("span", "queued " + sum.queue),
    el("span", "held (unreadable) " + sum.held_refused),
    el("span", "GPUs " + sum.gpus_allocated + " / " + sum.gpus_total),
    el("span", "decisions " + sum.decisions), el("span", "plans " + sum.plans),
    el("span", "open intents " + sum.actions_open),
    el("span", "fail-open jobs " + sum.failopen_jobs));
  const owner = {};
  for (const j of s.jobs || []) {
    for (const [node, gpus] of Object.entries(j.placement || {})) {
      for (const g of gpus) owner[node + "/" + g] = j;
    }
  }
  const width = Math.max(0, ...(s.nodes || []).map(n => n.gpus));
  const head = [el("th", "node")];
  for (let g = 0; g < width; g++) head.push(el("th", "GPU " + g));
  const map = [row(head)];
  for (const n of s.nodes || []) {
    const cells = [el("th", n.name)];
    for (let g = 0; g < width; g++) {
      const j = g < n.gpus ? owner[n.name + "/" + g] : undefined;
      const td = el("td", g >= n.gpus ? "" : j ? (j.name || j.id) : "free",
                    j ? "gpu job" : "gpu free");
      if (j) {
        td.style.backgroundColor = colour(j.id);
        td.title = j.id + " (Slurm " + j.slurm + ") " + j.name + " \u2014 " + j.user;
        td.setAttribute("data-job", j.id);
      }
      cells.push(td);
    }
    map.push(row(cells, "node"));
  }
  fill("map", map);
  const jobs = s.jobs || [];
  fill("queue", jobs.filter(j => j.state !== "running").map(j => {
    const r = row([j.id, j.slurm, j.name, j.user, j.state, j.requested,
                   el("td", j.reason || "\u2014", "reason")]);
    r.setAttribute("data-job", j.id);
    return r;
  }));
  fill("running", jobs.filter(j => j.state === "running").map(j => {
    const r = row([j.id, j.slurm, j.name, j.user, j.gpus,
      Object.entries(j.placement).map(([n, g]) => n + ":" + g.join(",")).join(" "),
      el("td", j.reason || "", "reason")]);
    r.firstChild.style.backgroundColor = colour(j.id);
    r.setAttribute("data-job", j.id);
    return r;
  }));
  fill("actions", (s.actions || []).map(a => row([
    new Date(a.time * 1000).toISOString().replace("T", " ").slice(0, 19), a.kind, a.job,
    shape(a.before) + " \u2192 " + shape(a.after), a.status,
    el("td", a.reason || a.detail || "", "reason")])));
  const st = document.getElementById("status");
  st.textContent = "state of " + new Date(s.time * 1000).toISOString() +
    (s.jobs_omitted ? " (" + s.jobs_omitted + " more jobs not shown)" : "");
  st.className = "";
}
async function refresh() {
  try {
    const r = await fetch("state.json", {cache: "no-store", credentials: "omit"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    const st = document.getElementById("status");
    st.textContent = "controller not answering: " + e.message;
    st.className = "stale";
  }
}
refresh();
setInterval(refresh, REFRESH_MS);
""".replace("REFRESH_MS", str(REFRESH_MS))


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CSP = (
    "default-src 'none'; "
    f"script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; "
    "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
"""The page's Content-Security-Policy: only its own two inline blocks, only fetches to its
own origin. ``/metrics`` and ``/state.json`` are served with ``default-src 'none'``."""

PAGE = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<title>gpuplan controller</title>
<style>{_STYLE}</style></head>
<body>
<h1 id="title">gpuplan controller</h1>
<p id="status">loading&hellip;</p>
<p id="kpi" class="kpi"></p>
<h2>GPU map</h2>
<table><tbody id="map"></tbody></table>
<h2>Queue</h2>
<table><thead><tr><th>job</th><th>Slurm</th><th>name</th><th>user</th><th>state</th>
<th>GPUs asked</th><th>reason</th></tr></thead><tbody id="queue"></tbody></table>
<h2>Running</h2>
<table><thead><tr><th>job</th><th>Slurm</th><th>name</th><th>user</th><th>GPUs</th>
<th>placement</th><th>reason</th></tr></thead><tbody id="running"></tbody></table>
<h2>Recent decisions</h2>
<table><thead><tr><th>time (UTC)</th><th>action</th><th>job</th><th>GPUs</th><th>status</th>
<th>reason / detail</th></tr></thead><tbody id="actions"></tbody></table>
<script>{_SCRIPT}</script>
</body></html>
""".encode()
"""The page, the same bytes for every request."""
