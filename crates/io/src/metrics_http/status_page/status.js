// gate64's status page: polls status.json every two seconds and renders it. Every value that
// comes from a client (identities come from certificates) reaches the page through
// textContent, never through HTML, so it is shown as text whatever it holds.
"use strict";

const REFRESH_MS = 2000;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return (u === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[u];
}

function duration(secs) {
  const d = Math.floor(secs / 86400), h = Math.floor(secs % 86400 / 3600),
        m = Math.floor(secs % 3600 / 60), s = secs % 60;
  const hms = [h, m, s].map(x => String(x).padStart(2, "0")).join(":");
  return d > 0 ? d + "d " + hms : hms;
}

function renderComponents(list) {
  const ul = document.getElementById("components");
  ul.replaceChildren(...list.map(c => {
    const li = el("li", null, c.state);
    li.append(el("span", c.name, "name"), el("span", c.state + (c.detail ? " · " + c.detail : ""), "detail"));
    return li;
  }));
}

function renderClients(clients) {
  document.getElementById("client-count").textContent = "(" + clients.length + ")";
  const body = document.getElementById("clients");
  body.replaceChildren(...clients.map(c => {
    const tr = el("tr");
    tr.append(
      el("td", c.identity || "—", "identity"),
      el("td", [c.auth_method, c.radius_user].filter(Boolean).join(" ") || "—"),
      el("td", [c.policy || c.filter_id, c.limit].filter(Boolean).join(", ") || "—"),
      el("td", c.transport),
      el("td", c.outer),
      el("td", (c.inner || []).join(", ")),
      el("td", duration(c.since_secs)),
      el("td", bytes(c.bytes_in), "num"),
      el("td", bytes(c.bytes_out), "num"),
      el("td", (c.tunnels || []).join(", ")),
    );
    return tr;
  }));
}

function chart(id, series, classes, format) {
  const svg = document.getElementById(id);
  const ns = "http://www.w3.org/2000/svg";
  const w = 600, h = 120, pad = 4;
  const max = Math.max(1e-9, ...series.flat());
  const shapes = series.map((points, i) => {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("class", classes[i]);
    const step = points.length > 1 ? w / (points.length - 1) : w;
    line.setAttribute("points", points.map((v, j) =>
      (j * step).toFixed(1) + "," + (h - pad - (v / max) * (h - 2 * pad)).toFixed(1)).join(" "));
    return line;
  });
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "12");
  label.textContent = "max " + format(max);
  svg.replaceChildren(...shapes, label);
}

function renderHistory(history) {
  const mbit = k => history.map(s => s[k] * 8 / 1e6);
  chart("throughput", [mbit("rx_bytes_per_sec"), mbit("tx_bytes_per_sec")], ["rx", "tx"],
        v => v.toFixed(2) + " Mbit/s");
  chart("clients-chart", [history.map(s => s.teredo_clients), history.map(s => s.iphttps_clients)],
        ["rx", "tx"], v => v.toFixed(0));
}

async function refresh() {
  try {
    const response = await fetch("status.json", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const s = await response.json();
    renderComponents(s.components || []);
    renderClients(s.clients || []);
    renderHistory(s.history || []);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "not updated: " + e.message;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
