// The cluster map: one card per node, one tile per GPU coloured by utilisation (grey without a
// recent reading), with memory, temperature, power, the job on it and its badges (idle, alert,
// out of service). Clicking a tile opens its history; the job on it links to the job page.
// Admins get Drain/Undrain on each node, and on the chosen GPU's tile for that GPU alone.

import { gpuControl, nodeControl } from "./actions.js";
import { fmtDuration, fmtGiB, fmtNum, h, legendGradient, NO_READING, pill, stateKind, utilColor, utilInk } from "./dom.js";

export function renderLegend() {
  return h(
    "div",
    { class: "legend", testid: "util-legend" },
    h("span", { class: "legend-label" }, "utilisation"),
    h("span", { class: "legend-scale" }, "0%"),
    h("span", { class: "legend-bar", style: { background: legendGradient() } }),
    h("span", { class: "legend-scale" }, "100%"),
    h("span", { class: "legend-swatch", style: { background: NO_READING } }),
    h("span", { class: "legend-scale" }, "no reading"),
    h("span", { class: "badge badge-idle" }, "idle"),
    h("span", { class: "legend-scale" }, "allocated, unused"),
  );
}

function jobLine(holders) {
  if (!holders || holders.length === 0) return h("div", { class: "tile-job tile-free" }, "free");
  return holders.map(({ job, share }) =>
    h(
      "div",
      { class: "tile-job", testid: "gpu-job", dataset: { jobId: job.id } },
      h(
        "a",
        { href: `#/jobs/${job.id}`, title: `${job.name} (${job.state})`, onclick: (e) => e.stopPropagation() },
        `#${job.id} ${job.name}`,
      ),
      h("span", { class: "tile-owner" }, share ? `${job.owner} · ${Math.round(share * 100)}%` : job.owner),
    ),
  );
}

function badges(gpu, idle, alerts) {
  const out = [];
  if (idle) {
    const title = `allocated to job ${idle.job_id} but idle for ${fmtDuration(idle.idle_for_s)}`;
    out.push(h("span", { class: "badge badge-idle", testid: "idle-badge", title }, `idle ${fmtDuration(idle.idle_for_s)}`));
  }
  const short = { gpu_temperature: "hot", gpu_xid: "xid error" };
  for (const alert of alerts) out.push(h("span", { class: "badge badge-alert", testid: "alert-badge", title: alert.message }, short[alert.kind] || "alert"));
  if (gpu.disabled) out.push(h("span", { class: "badge badge-off" }, "drained"));
  else if (!gpu.healthy) out.push(h("span", { class: "badge badge-alert" }, "unhealthy"));
  return out.length ? h("div", { class: "tile-badges" }, out) : null;
}

function gpuTile(node, gpu, data, selected, onClick) {
  const key = `${node.name}/${gpu.index}`;
  const reading = data.readings.get(key);
  const util = reading ? reading.utilization_pct : null;
  const alerts = (data.alerts || []).filter((a) => a.node === node.name && a.gpu === gpu.index);
  const isSelected = selected && selected.node === node.name && selected.index === gpu.index;
  const memPct = reading ? (100 * reading.memory_used_mib) / reading.memory_total_mib : 0;
  const open = () => onClick(node.name, gpu.index);
  return h(
    "div",
    {
      class: `gpu-tile${isSelected ? " selected" : ""}${alerts.length ? " alerting" : ""}`,
      testid: "gpu-tile",
      dataset: { node: node.name, gpu: gpu.index, hasReading: reading ? "1" : "0", util: util ?? "" },
      role: "button",
      tabindex: "0",
      title: `${node.name} GPU ${gpu.index} (${gpu.model}) — click for its history`,
      style: { background: utilColor(util), color: utilInk(util) },
      onclick: open,
      onkeydown: (e) => (e.key === "Enter" || e.key === " ") && (e.preventDefault(), open()),
    },
    h("div", { class: "tile-top" }, h("span", { class: "tile-name" }, `GPU ${gpu.index}`), h("span", { class: "tile-model" }, gpu.model)),
    h("div", { class: "tile-util", testid: "gpu-util" }, reading ? (util === null ? "n/a" : `${Math.round(util)}%`) : "—"),
    h(
      "div",
      { class: "tile-stats" },
      h("span", { title: "memory used / total" }, reading ? `${fmtGiB(reading.memory_used_mib)} / ${fmtGiB(reading.memory_total_mib)}` : fmtGiB(gpu.memory_mib)),
      h("span", { title: "temperature" }, reading?.temperature_c != null ? `${fmtNum(reading.temperature_c, 0)}°C` : ""),
      h(
        "span",
        { title: "power draw / the GPU's power limit", testid: "gpu-power" },
        reading?.power_w != null
          ? `${fmtNum(reading.power_w, 0)} / ${reading.power_limit_w != null ? fmtNum(reading.power_limit_w, 0) : "–"} W`
          : "",
      ),
    ),
    h("div", { class: "tile-mem" }, h("span", { style: { width: `${Math.min(100, memPct)}%` } })),
    jobLine(data.holders.get(key)),
    badges(gpu, data.idle?.get(key), alerts),
    isSelected ? gpuControl(node, gpu, data.who) : null,
  );
}

function nodeCard(node, data, selected, onClick) {
  const down = node.state === "down";
  const nodeAlerts = (data.alerts || []).filter((a) => a.node === node.name && (a.gpu === null || a.gpu === undefined));
  return h(
    "article",
    { class: `node-card node-${node.state}`, testid: "node-card", dataset: { node: node.name, state: node.state } },
    h(
      "header",
      { class: "node-head" },
      h("span", { class: "node-name" }, node.name),
      pill(node.state, stateKind(node.state), "node-state"),
      node.drain_requested && node.state === "up" ? pill("drain requested", "wait") : null,
      node.simulated ? h("span", { class: "tag" }, "simulated") : null,
      h("span", { class: "node-meta" }, `${node.gpus_free}/${node.gpus_total} GPUs free · ${node.cpus} CPUs · ${fmtGiB(node.memory_mib)}`),
      nodeControl(node, data.who),
    ),
    down ? h("p", { class: "node-warning" }, "Node is down: its GPUs are not scheduled and show their last state.") : null,
    nodeAlerts.map((a) => h("p", { class: "node-warning" }, a.message)),
    h("div", { class: "gpu-grid" }, node.gpus.map((gpu) => gpuTile(node, gpu, data, selected, onClick))),
    walls(node),
  );
}

// What the node enforces around each job, as it says: no wall is shown that is not there.
function walls(node) {
  const isolation = node.isolation || {};
  const kinds = ["users", "memory", "cpus", "devices", "kill", "tmp", "proc", "network", "images"].filter((k) => k in isolation);
  if (!kinds.length) return null;
  return h(
    "p",
    { class: "node-walls", testid: "node-walls" },
    `Walls: ${kinds.map((k) => `${k} ${isolation[k]}`).join(" · ")}`,
  );
}

export function renderClusterMap(data, selected, onClick) {
  if (!data.nodes.length) return [h("p", { class: "empty" }, "No nodes yet: start nodes with gpupool join, or a demo head with --fake-nodes.")];
  return data.nodes.map((node) => nodeCard(node, data, selected, onClick));
}
