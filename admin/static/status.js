// The status page: it fetches /api/upstreams every second and redraws.
// Plain DOM, no framework; text goes in with textContent only, so nothing
// a server or an error message says can become markup.
"use strict";

const interval = 1000;
let updates = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const fixed = (n, d) => (typeof n === "number" ? n.toFixed(d) : "–");
const ms = (n, samples) => (samples > 0 ? fixed(n, 1) : "–");

function setText(id, text) {
  const e = document.getElementById(id);
  if (e) e.textContent = text;
}

function stateBadge(s) {
  if (s.drained) return el("span", { class: "badge warn" }, "drained");
  return s.healthy ? el("span", { class: "badge ok" }, "up") : el("span", { class: "badge bad" }, "down");
}

function reasons(r) {
  const parts = Object.entries(r || {}).sort((a, b) => b[1] - a[1]).map(([k, v]) => k + " " + v);
  return parts.length ? parts.join(", ") : "–";
}

async function act(upstream, address, action) {
  const url = "/api/upstreams/" + encodeURIComponent(upstream) + "/servers/" + encodeURIComponent(address) + "/" + action;
  try {
    const resp = await fetch(url, { method: "POST" });
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      alert(action + " failed: " + (body.error || resp.status));
    }
  } catch (e) {
    alert(action + " failed: " + e);
  }
  refresh();
}

const columns = [
  ["server", "Server"], ["state", "State"], ["tries_per_second", "Tries/s"], ["failures_per_second", "Fail/s"],
  ["retries_per_second", "Retry/s"], ["p50", "p50 ms"], ["p90", "p90 ms"], ["p99", "p99 ms"],
  ["outstanding", "Active"], ["idle", "Idle"], ["tries", "Tries"], ["failures", "Failures"],
  ["retries", "Retries"], ["reasons", "Failure reasons"], ["ejections", "Ejections"], ["action", ""],
];

function serverRow(u, s) {
  const lat = s.latency_ms || {};
  const cls = s.drained ? "drained" : s.healthy ? "up" : "down";
  const name = s.address === s.resolved ? s.address : s.resolved + " (" + s.address + ")";
  const cells = {
    server: [name, s.backup ? el("span", { class: "badge" }, "backup") : null],
    state: [stateBadge(s), " ", el("span", { class: "muted" }, s.state)],
    tries_per_second: [fixed(s.tries_per_second, 2)],
    failures_per_second: [fixed(s.failures_per_second, 2)],
    retries_per_second: [fixed(s.retries_per_second, 2)],
    p50: [ms(lat.p50, lat.samples)], p90: [ms(lat.p90, lat.samples)], p99: [ms(lat.p99, lat.samples)],
    outstanding: [s.pool.active], idle: [s.pool.idle],
    tries: [s.tries], failures: [s.failures], retries: [s.retries],
    reasons: [reasons(s.failure_reasons)], ejections: [s.ejections],
    action: [el("button", {
      type: "button", "data-action": s.drained ? "enable" : "drain",
      onclick: () => act(u.name, s.address, s.drained ? "enable" : "drain"),
    }, s.drained ? "Enable" : "Drain")],
  };
  const tr = el("tr", { class: cls, "data-upstream": u.name, "data-server": s.resolved });
  for (const [key, label] of columns) {
    tr.append(el("td", { class: key, "data-field": key, "data-label": label }, ...cells[key]));
  }
  return tr;
}

function failures(u) {
  const items = [];
  for (const s of u.servers) {
    for (const f of s.recent_failures || []) items.push([s, f]);
  }
  items.sort((a, b) => (a[1].time < b[1].time ? 1 : -1));
  if (!items.length) return null;
  const list = el("ul", { class: "errors", "data-upstream": u.name });
  for (const [s, f] of items.slice(0, 10)) {
    list.append(el("li", { "data-server": s.resolved },
      el("span", { class: "muted" }, new Date(f.time).toLocaleTimeString() + " " + s.resolved + " "),
      el("code", {}, f.proxy_status), " ",
      f.retried ? "retried" : "not retried", f.decision ? " (" + f.decision + ")" : "", ": ",
      el("span", { class: "muted" }, f.error)));
  }
  return el("section", {}, el("h3", {}, "Last failures"), list);
}

function upstreamSection(u) {
  const total = u.servers.length;
  const avail = el("span", { class: "badge " + (u.available > 0 ? "ok" : "bad"), "data-field": "available" },
    u.available + "/" + total + " available");
  const head = el("h2", {}, u.name, avail,
    u.routed ? null : el("span", { class: "badge" }, "not routed"),
    el("span", { class: "summary", "data-field": "upstream-rates" },
      u.policy + " · " + fixed(u.tries_per_second, 2) + " tries/s · " + fixed(u.failures_per_second, 2) +
      " fail/s · " + fixed(u.retries_per_second, 2) + " retry/s"));
  const table = el("table", {},
    el("thead", {}, el("tr", {}, ...columns.map(([key, label]) => el("th", { class: key }, label)))),
    el("tbody", {}, ...u.servers.map((s) => serverRow(u, s))));
  return el("section", { class: "upstream", "data-upstream": u.name }, head, el("div", { class: "scroll" }, table), failures(u));
}

function render(data) {
  updates++;
  document.body.dataset.updates = String(updates);
  setText("config-hash", data.config.hash ? data.config.hash.slice(0, 12) : "–");
  setText("config-loaded", data.config.loaded_at ? new Date(data.config.loaded_at).toLocaleString() : "–");
  setText("updated", new Date(data.time).toLocaleTimeString());
  setText("in-flight", String(data.requests_in_flight));
  setText("window", String(data.window_seconds));
  const conns = data.connections.map((c) => c.listener + " " + c.protocol + ": " + c.open);
  setText("connections", conns.length ? conns.join(", ") : "none");
  const main = document.getElementById("upstreams");
  main.replaceChildren(...data.upstreams.map(upstreamSection));
}

let timer = null;

async function refresh() {
  clearTimeout(timer);
  const live = document.getElementById("live");
  try {
    const resp = await fetch("/api/upstreams", { cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    render(await resp.json());
    live.textContent = "live";
    live.className = "badge ok";
  } catch (e) {
    live.textContent = "disconnected: " + e.message;
    live.className = "badge bad";
  }
  timer = setTimeout(refresh, interval);
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});
refresh();
