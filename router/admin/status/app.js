// Sluice status page. Reads GET /admin/status with the admin token, which
// comes from the URL fragment (#token=...; a fragment never reaches the
// server) or the form, and stays in this tab's sessionStorage. Every value
// from the server is written with textContent, never as markup.
"use strict";

(() => {
  const KEY = "sluice-admin-token";
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#2f6fde", "#e8590c", "#12805c", "#c2255c", "#7048e8", "#0c8599",
    "#d9480f", "#5c940d", "#9c36b5", "#1098ad", "#f08c00", "#495057"];
  const $ = (id) => document.getElementById(id);
  let timer = 0;
  let interval = 2000;

  function takeToken() {
    const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
    if (m) {
      sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(KEY);
  }

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "text") e.textContent = v;
      else if (k === "cls") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  function num(v, digits) {
    if (v == null || Number.isNaN(v)) return "–";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (Number.isInteger(v)) return String(v);
    return v.toFixed(digits == null ? (a >= 100 ? 0 : 1) : digits);
  }

  function host(url) { return url.replace(/^https?:\/\//, ""); }

  function pill(text, kind) { return el("span", { cls: "pill " + (kind || ""), text }); }

  function meter(used, limit) {
    const unlimited = !limit;
    const frac = unlimited ? 0 : Math.min(used / limit, 1);
    const bar = el("i");
    bar.style.width = (frac * 100).toFixed(1) + "%";
    if (frac >= 0.9) bar.className = "bad"; else if (frac >= 0.7) bar.className = "warn";
    return el("div", { cls: "meter" + (unlimited ? " unlimited" : "") },
      el("div", { cls: "bar" }, bar),
      el("span", { text: unlimited ? num(used) + " · no limit" : num(used) + " / " + num(limit) }));
  }

  function fill(table, rows, cols, empty) {
    const body = table.tBodies[0];
    body.replaceChildren();
    if (!rows.length) {
      body.append(el("tr", {}, el("td", { cls: "empty", colspan: String(cols), text: empty })));
      return;
    }
    for (const cells of rows) {
      const tr = el("tr");
      for (const c of cells) {
        if (c instanceof Node) tr.append(c);
        else tr.append(el("td", { cls: c.cls || "", text: c.text }));
      }
      body.append(tr);
    }
  }

  const cell = (text, cls) => ({ text: String(text), cls });
  const numCell = (v, d) => cell(num(v, d), "num");
  const nodeCell = (n, cls) => el("td", { cls: cls || "" }, n);

  function renderBackends(list) {
    fill($("backends"), list.map((b) => {
      let routing = pill("in routing", "ok");
      if (b.drained) routing = pill("drained", "");
      else if (!b.in_routing) routing = pill("held out", "bad");
      const kinds = { closed: "ok", "half-open": "warn", open: "bad" };
      const kv = b.kv_usage == null ? cell("–") : nodeCell(meter(Math.round(b.kv_usage * 100), 100));
      if (b.kv_usage != null) kv.querySelector("span").textContent = (b.kv_usage * 100).toFixed(b.kv_usage < 0.1 ? 1 : 0) + "%";
      return [cell(b.model), nodeCell(el("span", { cls: "url", text: b.url })), nodeCell(routing),
        nodeCell(pill(b.breaker, kinds[b.breaker] || "")), numCell(b.in_flight), numCell(b.running),
        numCell(b.waiting), kv, cell(b.ttft_ms ? num(b.ttft_ms, 0) + " ms" : "–", "num"),
        numCell(b.tokens_per_sec || null), numCell(b.requests_per_sec, 1),
        cell(num(b.requests_total) + " · " + num(b.failures_total), "num")];
    }), 12, "No backends.");
  }

  function renderTenants(list, now) {
    const note = $("tenants-note");
    if (list == null) {
      note.hidden = true;
      fill($("tenants"), [], 9, "Open: no tenants are configured, so every caller is served without a key or limits.");
      return;
    }
    note.hidden = false;
    fill($("tenants"), list.map((t) => {
      const l = t.limits;
      let store = cell("–");
      if (t.store) {
        const age = Math.max(0, (Date.parse(now) - Date.parse(t.store.at)) / 1000);
        const parts = [];
        if (t.store.requests_limit) parts.push(num(t.store.requests_remaining) + "/" + num(t.store.requests_limit) + " req");
        if (t.store.tokens_limit) parts.push(num(t.store.tokens_remaining) + "/" + num(t.store.tokens_limit) + " tok");
        store = nodeCell(el("span", { text: (parts.join(" · ") || "no per-minute limit") + " left " },
          el("small", { text: ago(age * 1000) + " ago" })), "store");
      }
      return [nodeCell(el("b", { text: t.name })), cell(t.tier),
        nodeCell(meter(t.requests_last_minute, l.requests_per_minute)),
        nodeCell(meter(t.input_tokens_last_minute, l.input_tokens_per_minute)),
        nodeCell(meter(t.output_tokens_last_minute, l.output_tokens_per_minute)),
        nodeCell(meter(t.in_flight, l.concurrency)), nodeCell(meter(t.tokens_today, l.tokens_per_day)),
        numCell(t.denied_last_minute), store];
    }), 9, "No tenants.");
  }

  function renderQueues(list) {
    fill($("queues"), list.map((q) => [cell(q.model), cell(q.class), numCell(q.waiting),
      numCell(q.admitted_last_minute), numCell(q.shed_last_minute),
      cell(q.mean_wait_ms == null ? "–" : num(q.mean_wait_ms, 0) + " ms", "num"),
      cell(num(q.admitted_total) + " · " + num(q.shed_total), "num")]),
    7, "No model has admission on: requests go straight to a backend.");
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function chart(c, t, span) {
    const W = 380, H = 140, L = 38, R = 6, T = 8, B = 16;
    const end = t.length ? t[t.length - 1] : Date.now();
    const start = end - span;
    let top = 0;
    for (const s of c.series) for (const v of s.values) if (v != null && v > top) top = v;
    top = c.unit === "%" ? 100 : niceMax(top);
    const x = (ms) => L + ((ms - start) / span) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": c.title });
    for (const f of [0, 0.5, 1]) {
      const yy = y(top * f);
      g.append(svg("line", { x1: L, x2: W - R, y1: yy, y2: yy, class: "grid" }));
      const lab = svg("text", { x: L - 4, y: yy + 3, "text-anchor": "end" });
      lab.textContent = num(top * f);
      g.append(lab);
    }
    for (const [ms, text, anchor] of [[start, "−" + ago(span), "start"], [end, "now", "end"]]) {
      const lab = svg("text", { x: x(ms), y: H - 3, "text-anchor": anchor });
      lab.textContent = text;
      g.append(lab);
    }
    const legend = el("div", { cls: "legend" });
    c.series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      let pts = [];
      const flush = () => {
        if (pts.length === 1) pts.push(pts[0]);
        if (pts.length) g.append(svg("polyline", { points: pts.join(" "), stroke: color }));
        pts = [];
      };
      s.values.forEach((v, j) => {
        if (v == null || t[j] < start) { flush(); return; }
        pts.push(x(t[j]).toFixed(1) + "," + y(Math.min(v, top)).toFixed(1));
      });
      flush();
      let last = null;
      for (let j = s.values.length - 1; j >= 0; j--) if (s.values[j] != null) { last = s.values[j]; break; }
      const sw = el("b");
      sw.style.background = color;
      legend.append(el("span", {}, sw, host(s.name), el("em", { text: num(last) + (c.unit === "%" ? "%" : "") })));
    });
    if (!c.series.length) legend.append(el("span", { text: "nothing to show yet" }));
    return el("figure", {}, el("figcaption", { text: c.title + " " },
      c.unit ? el("small", { text: c.unit }) : null), g, legend);
  }

  function ago(ms) {
    const s = Math.round(ms / 1000);
    return s < 120 ? s + " s" : Math.round(s / 60) + " min";
  }

  // The charts span the history kept, or less while there is less (at
  // least a minute), so that a fresh router's charts are not mostly empty.
  function renderCharts(h, keep) {
    const have = h.t.length > 1 ? h.t[h.t.length - 1] - h.t[0] : 0;
    const span = Math.min(keep, Math.max(have, 60000));
    $("window").textContent = span >= 120000 ? Math.round(span / 60000) + " minutes" : Math.round(span / 1000) + " seconds";
    $("charts").replaceChildren(...h.charts.map((c) => chart(c, h.t, span)));
  }

  function render(s) {
    interval = Math.max(500, (s.interval_s || 2) * 1000);
    renderBackends(s.backends || []);
    renderTenants(s.tenants, s.now);
    renderQueues(s.queues || []);
    renderCharts(s.history, (s.history_s || 600) * 1000);
    $("updated").textContent = "updated " + new Date(s.now).toLocaleTimeString();
  }

  function showLogin(msg) {
    $("main").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = msg || "";
    $("conn").textContent = "no token";
    $("conn").className = "pill";
    $("token").focus();
  }

  async function poll() {
    clearTimeout(timer);
    const token = takeToken();
    if (!token) { showLogin(); return; }
    try {
      const res = await fetch("/admin/status", { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
      if (res.status === 401) {
        sessionStorage.removeItem(KEY);
        showLogin("That token was refused.");
        return;
      }
      if (!res.ok) throw new Error("HTTP " + res.status);
      render(await res.json());
      $("login").hidden = true;
      $("main").hidden = false;
      $("conn").textContent = "live";
      $("conn").className = "pill ok";
    } catch (e) {
      $("conn").textContent = "unreachable: " + e.message;
      $("conn").className = "pill bad";
    }
    timer = setTimeout(poll, interval);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = $("token").value.trim();
      if (v) sessionStorage.setItem(KEY, v);
      $("token").value = "";
      poll();
    });
    window.addEventListener("hashchange", poll);
    poll();
  });
})();
