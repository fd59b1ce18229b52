// DOM and formatting helpers. Every value from the API reaches the page through text nodes
// (h() appends strings with append(), never innerHTML), so job names, log lines and messages
// can never inject markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "testid") el.dataset.testid = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style") Object.assign(el.style, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function secondsSince(iso) {
  return iso ? (Date.now() - Date.parse(iso)) / 1000 : null;
}

export const fmtAgo = (iso) => (iso ? fmtDuration(secondsSince(iso)) : "–");

export function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString([], { hour12: false }) : d.toLocaleString([], { hour12: false });
}

export function fmtGiB(mib) {
  if (mib === null || mib === undefined) return "–";
  return `${(mib / 1024).toFixed(mib >= 10240 ? 0 : 1)} GiB`;
}

export function fmtNum(x, digits = 1) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  return String(Number(x.toFixed(digits))); // 0.5, not 0.50; 3, not 3.0
}

// Utilisation colour scale, cold (idle) to hot (busy): one sequential ramp, also drawn as the legend.
export const UTIL_STOPS = [
  [0, [38, 52, 77]],
  [20, [31, 95, 139]],
  [40, [27, 138, 143]],
  [60, [76, 175, 110]],
  [80, [201, 194, 63]],
  [100, [243, 156, 61]],
];
export const NO_READING = "rgb(58, 63, 71)";

function utilRgb(pct) {
  const p = Math.min(100, Math.max(0, pct));
  for (let i = 1; i < UTIL_STOPS.length; i++) {
    const [p1, c1] = UTIL_STOPS[i];
    if (p <= p1) {
      const [p0, c0] = UTIL_STOPS[i - 1];
      const t = (p - p0) / (p1 - p0);
      return c0.map((v, k) => Math.round(v + (c1[k] - v) * t));
    }
  }
  return UTIL_STOPS[UTIL_STOPS.length - 1][1];
}

export function utilColor(pct) {
  if (pct === null || pct === undefined) return NO_READING;
  return `rgb(${utilRgb(pct).join(", ")})`;
}

// Dark text on the light end of the ramp, light text on the dark end: readable on every tile.
export function utilInk(pct) {
  if (pct === null || pct === undefined) return "#c9d1dc";
  const [r, g, b] = utilRgb(pct);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#10151c" : "#f1f5f9";
}

export function legendGradient() {
  return `linear-gradient(to right, ${UTIL_STOPS.map(([p, c]) => `rgb(${c.join(",")}) ${p}%`).join(", ")})`;
}

export function pill(text, kind, testid) {
  return h("span", { class: `pill pill-${kind}`, testid }, text);
}

export function stateKind(state) {
  return (
    {
      up: "ok",
      running: "ok",
      succeeded: "ok",
      starting: "info",
      pending: "wait",
      draining: "wait",
      drained: "muted",
      preempted: "wait",
      cancelled: "muted",
      down: "bad",
      failed: "bad",
      lost: "bad",
    }[state] || "muted"
  );
}

export function section(id, title, extra, ...body) {
  return h(
    "section",
    { class: "panel", id: `section-${id}`, testid: `section-${id}` },
    h("div", { class: "panel-head" }, h("h2", {}, title), extra),
    ...body,
  );
}

export function emptyNote(text, testid) {
  return h("p", { class: "empty", testid }, text);
}
