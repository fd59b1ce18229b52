// The overview's services panel: each inference service with its replica counts and the load the
// gateway reports (requests a second, in flight, queued, latency p50/p99, errors), then a row per
// replica with the same figures, so a hot or failing replica stands out from its siblings.

import { h, pill } from "./dom.js";

const SERVICE_KIND = { ready: "ok", degraded: "wait", starting: "info", idle: "muted" };

function rate(x) {
  return x < 100 ? x.toFixed(1) : String(Math.round(x));
}

function ms(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const v = seconds * 1000;
  return v < 10 ? `${v.toFixed(1)} ms` : `${Math.round(v)} ms`;
}

function loadCells(load) {
  if (!load) return ["–", "–", "–", "–", "–", "–"].map((t) => h("td", { class: "num" }, t));
  return [
    h("td", { class: "num", testid: "svc-rps" }, rate(load.requests_per_s)),
    h("td", { class: "num", testid: "svc-in-flight" }, String(load.in_flight)),
    h("td", { class: "num", testid: "svc-queued" }, String(load.queued)),
    h("td", { class: "num", testid: "svc-p50" }, ms(load.latency_p50_s)),
    h("td", { class: "num", testid: "svc-p99" }, ms(load.latency_p99_s)),
    h("td", { class: "num", testid: "svc-errors" }, rate(load.errors_per_s)),
  ];
}

function serviceRows(s) {
  const head = h(
    "tr",
    { class: "service-row", testid: "service-row", dataset: { service: s.name } },
    h("td", {}, h("strong", {}, s.name), h("span", { class: "job-name" }, ` ${s.project}`)),
    h("td", {}, pill(s.state, SERVICE_KIND[s.state] || "muted", "service-state")),
    h("td", { class: "num", testid: "service-replicas" }, `${s.replicas.ready}/${s.replicas.desired}`),
    ...loadCells(s.load),
  );
  const replicas = s.replica_list.map((r) =>
    h(
      "tr",
      { class: "replica-row", testid: "replica-row", dataset: { service: s.name, jobId: r.job_id } },
      h("td", { class: "replica-name" }, h("a", { href: `#/jobs/${r.job_id}` }, `#${r.job_id}`), r.node ? ` on ${r.node}` : ""),
      h("td", {}, r.ready ? "ready" : r.stopping ? "stopping" : "not ready"),
      h("td", {}),
      ...loadCells(r.load),
    ),
  );
  return [head, ...replicas];
}

// `services` null: the head has no services API (the section stays hidden); [] likewise.
export function renderServices(el, services) {
  const panel = el.closest("section");
  if (panel) panel.hidden = !services || services.length === 0;
  if (!services || !services.length) return el.replaceChildren();
  el.replaceChildren(
    h(
      "table",
      { class: "table services" },
      h("thead", {}, h("tr", {}, ["Service", "State", "Replicas", "Req/s", "In flight", "Queued", "p50", "p99", "Errors/s"].map((t) => h("th", {}, t)))),
      h("tbody", {}, services.flatMap(serviceRows)),
    ),
  );
}
