// The status page: it fetches /api/upstreams every second and redraws.
// Plain DOM, no framework; text goes in with textContent only, so nothing
// a server or an error message says can become markup. Times are shown
// one way, relative to the server's clock ("3 min ago", "in 12 s"), the
// date in the element's title.
"use strict";

const interval = 1000;
let updates = 0;
let lastUpdate = 0; // the browser's clock at the last update

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const fixed = (n, d) => (typeof n === "number" ? n.toFixed(d) : "–");
const ms = (n, samples) => (samples > 0 ? fixed(n, 1) : "–");

function setText(id, text, title) {
  const e = document.getElementById(id);
  if (!e) return;
  e.textContent = text;
  if (title !== undefined) e.title = title;
}

// relative says how far t (a time from the API) is from now (the
// server's time of the same answer): "just now", "12 s ago", "3 min ago",
// "in 12 s".
function relative(t, now) {
  const secs = (Date.parse(t) - Date.parse(now)) / 1000;
  if (Number.isNaN(secs)) return "–";
  const future = secs > 0;
  const a = future ? Math.ceil(secs) : Math.floor(-secs);
  if (a < 1) return future ? "in 1 s" : "just now";
  let span;
  if (a < 60) span = a + " s";
  else if (a < 3600) span = Math.floor(a / 60) + " min";
  else if (a < 86400) span = Math.floor(a / 3600) + " h";
  else span = Math.floor(a / 86400) + " d";
  return future ? "in " + span : span + " ago";
}

// when is a time element showing t relative to now, its date in the title.
function when(t, now, prefix) {
  return el("time", { dateTime: t, title: new Date(t).toLocaleString() }, (prefix || "") + relative(t, now));
}

// condition is how a server's state reads: its badge's class and word,
// and a line (for down and ejected, stateLine says when it comes back).
function condition(s) {
  if (s.drained) return ["warn", "drained", "taken out by hand; tries in flight finish"];
  switch (s.condition) {
    case "down":
    case "ejected":
      return ["bad", s.condition, null];
    case "unhealthy":
      return ["bad", "unhealthy", s.reason];
    case "slow_start":
      return ["warn", "slow start", s.reason];
  }
  return ["ok", "up", null];
}

function stateLine(s, now) {
  const [cls, word, text] = condition(s);
  const line = el("p", { class: "state", "data-field": "state" }, el("span", { class: "badge " + cls }, word));
  if (!s.drained && s.until) {
    line.append(" ", when(s.until, now, "back "), el("span", { class: "muted" }, " · " + s.reason));
  } else if (text) {
    line.append(" ", el("span", { class: "muted" }, text));
  }
  return line;
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

// stat is one figure of a server's card: a label over a value.
function stat(field, label, value, bad) {
  return el("div", { class: "stat" + (bad ? " bad" : "") },
    el("dt", {}, label), el("dd", { "data-field": field }, value));
}

function serverCard(u, s, now) {
  const lat = s.latency_ms || {};
  const cls = s.drained ? "drained" : s.healthy ? (s.condition === "slow_start" ? "warming" : "up") : "down";
  const action = s.drained ? "enable" : "drain";
  const title = el("div", { class: "addr" },
    el("span", { class: "name", "data-field": "server" }, s.resolved),
    s.address !== s.resolved ? el("span", { class: "muted" }, " " + s.address) : null,
    s.backup ? el("span", { class: "badge" }, "backup") : null);
  const button = el("button", {
    type: "button", "data-action": action, title: (s.drained ? "Put " : "Take ") + s.address + (s.drained ? " back" : " out"),
    onclick: () => act(u.name, s.address, action),
  }, s.drained ? "Enable" : "Drain");
  const stats = el("dl", { class: "stats" },
    stat("tries_per_second", "tries/s", fixed(s.tries_per_second, 2)),
    stat("failures_per_second", "failures/s", fixed(s.failures_per_second, 2), s.failures_per_second > 0),
    stat("retries_per_second", "retries/s", fixed(s.retries_per_second, 2)),
    stat("tries", "tries", s.tries),
    stat("failures", "failures", s.failures, s.failures > 0),
    stat("retries", "retries", s.retries),
    stat("p50", "p50 ms", ms(lat.p50, lat.samples)),
    stat("p90", "p90 ms", ms(lat.p90, lat.samples)),
    stat("p99", "p99 ms", ms(lat.p99, lat.samples)),
    stat("outstanding", "active", s.pool.active),
    stat("idle", "idle conns", s.pool.idle),
    stat("ejections", "ejections", s.ejections));
  const reasons = Object.entries(s.failure_reasons || {}).sort((a, b) => b[1] - a[1]);
  const why = el("p", { class: "reasons", "data-field": "reasons" });
  if (reasons.length) {
    why.append(el("span", { class: "muted" }, "failed by reason "));
    for (const [k, v] of reasons) why.append(el("span", { class: "chip" }, k + " " + v));
  }
  return el("article", { class: "server " + cls, "data-upstream": u.name, "data-server": s.resolved },
    el("div", { class: "card-head" }, title, button),
    stateLine(s, now), stats, reasons.length ? why : null);
}

// failures lists the upstream's last kinds of failure, across its
// servers, the most recent first: each with its count, when it last (and
// first) happened, its Proxy-Status, the decision and the last error.
function failures(u, now) {
  const items = [];
  for (const s of u.servers) {
    for (const f of s.recent_failures || []) items.push([s, f]);
  }
  if (!items.length) return null;
  items.sort((a, b) => Date.parse(b[1].time) - Date.parse(a[1].time));
  const list = el("ul", { class: "errors", "data-upstream": u.name });
  for (const [s, f] of items.slice(0, 10)) {
    const count = f.count || 1;
    const times = el("span", { class: "when" }, when(f.time, now));
    if (count > 1 && f.first && relative(f.first, now) !== relative(f.time, now)) times.append(", first ", when(f.first, now));
    list.append(el("li", { "data-server": s.resolved },
      el("div", { class: "what" },
        el("span", { class: "count" + (count > 1 ? " many" : ""), "data-field": "count" }, count + "×"),
        el("code", {}, f.proxy_status),
        el("span", { class: "on" }, s.resolved),
        times),
      el("div", { class: "decision" + (f.retried ? "" : " final"), "data-field": "decision" },
        f.decision || (f.retried ? "retried" : "not retried")),
      el("div", { class: "error muted" }, f.error)));
  }
  return el("section", { class: "failures" }, el("h3", {}, "Last failures"), list);
}

function upstreamSection(u, now) {
  const total = u.servers.length;
  const avail = el("span", { class: "badge " + (u.available > 0 ? (u.available < total ? "warn" : "ok") : "bad"), "data-field": "available" },
    u.available + "/" + total + " available");
  const head = el("div", { class: "upstream-head" },
    el("h2", {}, u.name), avail,
    u.routed ? null : el("span", { class: "badge" }, "not routed"),
    el("span", { class: "summary", "data-field": "upstream-rates" },
      u.policy + " · " + fixed(u.tries_per_second, 2) + " tries/s · " + fixed(u.failures_per_second, 2) +
      " failures/s · " + fixed(u.retries_per_second, 2) + " retries/s"));
  const cards = u.servers.length
    ? el("div", { class: "servers" }, ...u.servers.map((s) => serverCard(u, s, now)))
    : el("p", { class: "note" }, "No server yet (no address resolved).");
  return el("section", { class: "upstream", "data-upstream": u.name }, head, cards, failures(u, now));
}

// size writes a number of bytes in binary units.
function size(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

// cacheCard is a cache store: its hit ratio, what it holds, what its
// routes did with requests.
function cacheCard(c) {
  const ratio = typeof c.hit_ratio === "number" ? (100 * c.hit_ratio).toFixed(1) + "%" : "–";
  const full = c.capacity > 0 ? c.bytes / c.capacity : 0;
  const stats = el("dl", { class: "stats" },
    stat("hit_ratio", "hit ratio", ratio),
    stat("objects", "objects", c.objects),
    stat("bytes", "held", size(c.bytes) + " / " + size(c.capacity)),
    stat("hits", "hits", c.hits),
    stat("misses", "misses", c.misses),
    stat("stale", "stale", c.stale),
    stat("collapsed", "collapsed", c.collapsed),
    stat("evictions", "evictions", c.evictions),
    stat("purged", "purged", c.purged));
  return el("article", { class: "server store " + (full > 0.98 ? "warming" : "up"), "data-store": c.name },
    el("div", { class: "card-head" },
      el("div", { class: "addr" }, el("span", { class: "name", "data-field": "store" }, c.name),
        el("span", { class: "badge" }, c.kind))),
    stats);
}

function render(data) {
  updates++;
  lastUpdate = Date.now();
  document.body.dataset.updates = String(updates);
  const now = data.time;
  setText("config-hash", data.config.hash ? data.config.hash.slice(0, 12) : "–", data.config.hash || "");
  const loaded = document.getElementById("config-loaded");
  if (data.config.loaded_at && !data.config.loaded_at.startsWith("0001-")) {
    loaded.replaceChildren(when(data.config.loaded_at, now));
  } else {
    loaded.textContent = "–";
  }
  setText("in-flight", String(data.requests_in_flight));
  setText("window", String(data.window_seconds));
  const conns = data.connections.map((c) => c.listener + " " + c.protocol + ": " + c.open);
  setText("connections", conns.length ? conns.join(", ") : "none");
  const caches = document.getElementById("caches");
  const stores = data.caches || [];
  caches.hidden = stores.length === 0;
  if (stores.length) {
    caches.replaceChildren(el("h2", {}, "Caches"), el("div", { class: "servers" }, ...stores.map(cacheCard)));
  }
  const main = document.getElementById("upstreams");
  main.replaceChildren(...data.upstreams.map((u) => upstreamSection(u, now)));
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
    live.title = "updated every " + interval / 1000 + " s";
  } catch (e) {
    const since = lastUpdate ? "; last update " + relative(new Date(lastUpdate).toISOString(), new Date().toISOString()) : "";
    live.textContent = "disconnected" + since;
    live.className = "badge bad";
    live.title = e.message;
  }
  timer = setTimeout(refresh, interval);
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});
refresh();
