// The overview (#/ and #/gpu/NODE/INDEX): alerts, a summary strip, the cluster map, the chosen
// GPU's history, the services and their load, the queue and the projects. One refresh asks the
// head for everything at once; /gpus/idle, /alerts and /services are optional (a head without
// them answers 404 and the page hides them).

import { whoami } from "./actions.js";
import { getJson } from "./api.js";
import { createHistory } from "./charts.js";
import { renderClusterMap, renderLegend } from "./cluster.js";
import { h, section } from "./dom.js";
import { renderAlerts, renderProjects, renderQueue, renderSummary } from "./panels.js";
import { renderServices } from "./services.js";

const INTERVAL_MS = 3000;

function gpuKey(node, index) {
  return `${node}/${index}`;
}

// Who holds which GPU, from the jobs' placements (a shared GPU can hold several jobs).
function holders(jobs) {
  const map = new Map();
  for (const job of jobs) {
    for (const p of job.placements || []) {
      for (const index of p.gpus) {
        const key = gpuKey(p.node, index);
        if (!map.has(key)) map.set(key, []);
        map.get(key).push({ job, share: p.gpu_share });
      }
    }
  }
  return map;
}

function byGpu(rows, indexField) {
  const map = new Map();
  for (const row of rows || []) map.set(gpuKey(row.node, row[indexField]), row);
  return map;
}

export function mountOverview(container, selected) {
  const parts = {
    alerts: h("div", { class: "alerts", testid: "alerts", hidden: true }),
    summary: h("div", { class: "summary", testid: "summary" }),
    map: h("div", { class: "node-grid", testid: "cluster-map" }, h("p", { class: "empty" }, "Loading…")),
    services: h("div", { testid: "services" }),
    queue: h("div", { testid: "queue" }),
    projects: h("div", { testid: "projects" }),
  };
  document.title = "gpupool";
  const history = createHistory();
  let current = selected;
  let last = null;

  const select = (gpu) => {
    current = gpu;
    history.select(gpu);
    if (last) renderMap();
    if (gpu) history.element.scrollIntoView({ behavior: "smooth", block: "nearest" });
  };

  const onTileClick = (node, index) => {
    const same = current && current.node === node && current.index === index;
    location.hash = same ? "#/" : `#/gpu/${encodeURIComponent(node)}/${index}`;
  };

  function renderMap() {
    parts.map.replaceChildren(...renderClusterMap(last, current, onTileClick));
  }

  // Hidden until a refresh finds a service: most clusters run none.
  const servicesPanel = section("services", "Services", h("span", { class: "panel-note" }, "replicas and the gateway's load, last 30 s"), parts.services);
  servicesPanel.hidden = true;
  container.replaceChildren(
    parts.alerts,
    parts.summary,
    section("cluster", "Cluster", renderLegend(), parts.map),
    history.element,
    servicesPanel,
    section("queue", "Queue", h("span", { class: "panel-note" }, "pending jobs, oldest first"), parts.queue),
    section("projects", "Projects", h("span", { class: "panel-note" }, "GPUs held against quota and fair share"), parts.projects),
  );
  history.select(current);

  async function refresh() {
    const [nodes, latest, jobs, projects, idle, alerts, services, who] = await Promise.all([
      getJson("/api/v1/nodes"),
      getJson("/api/v1/telemetry/latest?since=2m"),
      getJson("/api/v1/jobs"),
      getJson("/api/v1/projects"),
      getJson("/api/v1/gpus/idle", { optional: true }),
      getJson("/api/v1/alerts", { optional: true }),
      getJson("/api/v1/services", { optional: true }),
      whoami(),
    ]);
    last = {
      nodes,
      jobs,
      readings: byGpu(latest, "gpu"),
      holders: holders(jobs),
      idle: idle === null ? null : byGpu(idle, "gpu"),
      alerts,
      who,
    };
    renderAlerts(parts.alerts, alerts);
    renderSummary(parts.summary, last);
    renderMap();
    renderServices(parts.services, services);
    renderQueue(parts.queue, jobs);
    renderProjects(parts.projects, projects);
    await history.refresh();
  }

  return { refresh, select, interval: INTERVAL_MS };
}
