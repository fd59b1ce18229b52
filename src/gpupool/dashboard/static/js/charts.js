// A GPU's history (GET /api/v1/nodes/NODE/telemetry): utilisation, temperature and power over a
// chosen window, drawn with uPlot. The plots are created once per GPU and then only get new
// data, so a refresh keeps the cursor and never redraws the panel. Without uPlot (npm was
// missing at install), the panel says how to get charts instead.

import { getJson } from "./api.js";
import { h } from "./dom.js";

const RANGES = ["15m", "1h", "6h", "1d"];
const METRICS = [
  { key: "utilization_pct", title: "Utilisation", unit: "%", color: "#4cc38a", range: [0, 100] },
  { key: "temperature_c", title: "Temperature (°C)", unit: "°C", color: "#f39c3d", range: null },
  { key: "power_w", title: "Power (W)", unit: "W", color: "#5aa9e6", range: null },
];
const AXIS = { stroke: "#8b96a8", grid: { stroke: "#232c39", width: 1 }, ticks: { stroke: "#232c39", width: 1 } };

// The x axis always spans the whole window asked for (not just the readings in it), so a new
// GPU with one reading shows as a point at the right edge, not a years-wide axis.
function plotOptions(metric, width, window) {
  const fmt = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(metric.unit === "%" ? 0 : 1)} ${metric.unit}`);
  return {
    width,
    height: 170,
    legend: { show: true, live: true },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true, range: () => window() }, y: metric.range ? { range: metric.range } : { range: (u, min, max) => [Math.min(0, min), max * 1.1 || 1] } },
    series: [{}, { label: metric.title.replace(/ \(.*\)$/, ""), stroke: metric.color, width: 1.6, fill: `${metric.color}22`, value: (u, v) => fmt(v), spanGaps: false }],
    axes: [{ ...AXIS }, { ...AXIS, size: 56, values: (u, vals) => vals.map((v) => `${v}${metric.unit === "%" ? "%" : ""}`) }],
  };
}

export function createHistory() {
  const title = h("h2", {}, "GPU history");
  const rangeButtons = RANGES.map((r) => h("button", { type: "button", class: "seg", dataset: { range: r } }, r));
  const body = h("div", { class: "charts", testid: "gpu-charts" });
  const note = h("p", { class: "empty", testid: "charts-note", hidden: true });
  const element = h(
    "section",
    { class: "panel", id: "section-history", testid: "gpu-history", hidden: true },
    h(
      "div",
      { class: "panel-head" },
      title,
      h("div", { class: "panel-tools" }, h("div", { class: "segmented" }, rangeButtons), h("a", { class: "ghost-link", href: "#/", testid: "history-close" }, "Close")),
    ),
    note,
    body,
  );
  let gpu = null;
  let range = "15m";
  let plots = [];
  let span = [0, 1];
  let observer = null;

  const teardown = () => {
    plots.forEach((p) => p.plot?.destroy());
    plots = [];
    observer?.disconnect();
    observer = null;
    body.replaceChildren();
  };

  function build() {
    teardown();
    if (!window.uPlot) {
      note.hidden = false;
      note.textContent = "No charts: the uPlot library is missing. Run scripts/install.sh with npm installed to get charts, then reload this page.";
      return;
    }
    note.hidden = true;
    plots = METRICS.map((metric) => {
      const box = h("div", { class: "chart", testid: "gpu-chart", dataset: { metric: metric.key } }, h("div", { class: "chart-title" }, metric.title));
      body.append(box);
      return { metric, box, plot: null };
    });
    observer = new ResizeObserver(() => plots.forEach((p) => p.plot?.setSize({ width: p.box.clientWidth - 16, height: 170 })));
    plots.forEach((p) => observer.observe(p.box));
  }

  function draw(history) {
    const points = history.points;
    span = [Date.parse(history.since) / 1000, Date.parse(history.until) / 1000];
    const xs = points.map((p) => Date.parse(p.time) / 1000);
    for (const p of plots) {
      const data = [xs, points.map((pt) => pt[p.metric.key])];
      if (!p.plot) p.plot = new window.uPlot(plotOptions(p.metric, Math.max(200, p.box.clientWidth - 16), () => span), data, p.box);
      else p.plot.setData(data);
      p.box.dataset.points = String(xs.length);
    }
  }

  async function refresh() {
    if (!gpu) return;
    const want = gpu;
    const path = `/api/v1/nodes/${encodeURIComponent(want.node)}/telemetry?gpu=${want.index}&since=${range}&resolution=auto`;
    const history = await getJson(path);
    if (want !== gpu) return;
    if (!history.points.length) {
      note.hidden = false;
      note.textContent = "No readings in this window yet (the head reads every GPU every few seconds).";
    } else if (window.uPlot) note.hidden = true;
    if (plots.length) draw(history);
  }

  function select(next) {
    gpu = next;
    element.hidden = !gpu;
    if (!gpu) return teardown();
    title.textContent = `GPU history — ${gpu.node} · GPU ${gpu.index}`;
    build();
    refresh().catch(() => {}); // the view's refresh loop reports errors
  }

  rangeButtons.forEach((b) =>
    b.addEventListener("click", () => {
      range = b.dataset.range;
      rangeButtons.forEach((x) => x.classList.toggle("active", x === b));
      if (gpu) select(gpu);
    }),
  );
  rangeButtons[0].classList.add("active");
  window.addEventListener("gpupool:charts", () => gpu && element.isConnected && select(gpu));
  return { element, select, refresh };
}
