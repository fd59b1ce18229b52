// The overview's other panels: the alerts banner, the summary strip, the queue (pending jobs and
// why they wait, in the scheduler's own words) and the projects (GPUs held against quota, fair
// share and limit).

import { emptyNote, fmtAgo, fmtDuration, fmtNum, fmtTime, h, pill, secondsSince } from "./dom.js";

const ALERT_KINDS = { gpu_temperature: "GPU temperature", gpu_xid: "GPU XID error", node_down: "Node down" };

const ALERTS_SHOWN = 3; // more fold away, so a burst of alerts never pushes the cluster off screen

function alertItem(a) {
  return h(
    "li",
    { testid: "alert", dataset: { kind: a.kind } },
    h("span", { class: "alert-kind" }, ALERT_KINDS[a.kind] || a.kind),
    h("span", { class: "alert-where" }, [a.node, a.gpu != null ? `GPU ${a.gpu}` : null].filter(Boolean).join(" · ")),
    h("span", { class: "alert-message" }, a.message),
    a.job_id != null ? h("a", { href: `#/jobs/${a.job_id}` }, `job #${a.job_id}`) : null,
    h("span", { class: "alert-age" }, `since ${fmtAgo(a.raised_at)}`),
  );
}

export function renderAlerts(el, alerts) {
  const active = (alerts || []).filter((a) => !a.cleared_at);
  el.hidden = active.length === 0;
  if (!active.length) return el.replaceChildren();
  const wasOpen = el.querySelector("details")?.open;
  const rest = active.slice(ALERTS_SHOWN);
  el.replaceChildren(
    h("div", { class: "alerts-title" }, `${active.length} active alert${active.length > 1 ? "s" : ""}`),
    h("ul", {}, active.slice(0, ALERTS_SHOWN).map(alertItem)),
    rest.length ? h("details", { open: wasOpen }, h("summary", {}, `${rest.length} more`), h("ul", {}, rest.map(alertItem))) : null,
  );
}

function stat(label, value, testid, note) {
  return h("div", { class: "stat", testid }, h("div", { class: "stat-value" }, value), h("div", { class: "stat-label" }, label), note ? h("div", { class: "stat-note" }, note) : null);
}

export function renderSummary(el, data) {
  const gpus = data.nodes.flatMap((n) => n.gpus.map((g) => ({ node: n, gpu: g })));
  const up = data.nodes.filter((n) => n.state === "up").length;
  const utils = [...data.readings.values()].map((r) => r.utilization_pct).filter((u) => u !== null && u !== undefined);
  const avg = utils.length ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)}%` : "–";
  const running = data.jobs.filter((j) => j.state === "running" || j.state === "starting").length;
  const pending = data.jobs.filter((j) => j.state === "pending").length;
  el.replaceChildren(
    stat("nodes up", `${up}/${data.nodes.length}`, "stat-nodes"),
    stat("GPUs allocated", `${data.holders.size}/${gpus.length}`, "stat-gpus"),
    stat("average utilisation", avg, "stat-util"),
    stat("jobs running", String(running), "stat-running"),
    stat("jobs waiting", String(pending), "stat-pending"),
    data.idle ? stat("idle allocated GPUs", String(data.idle.size), "stat-idle") : null,
    data.alerts ? stat("alerts", String(data.alerts.filter((a) => !a.cleared_at).length), "stat-alerts") : null,
  );
}

function asked(job) {
  const per = fmtNum(job.gpus, 2);
  if (job.max_workers) return `${per} × ${job.workers}:${job.max_workers} workers`; // elastic: its range
  return job.workers > 1 ? `${per} × ${job.workers} workers` : per === "0" ? "CPU only" : per;
}

export function renderQueue(el, jobs) {
  const pending = jobs.filter((j) => j.state === "pending").sort((a, b) => Date.parse(a.submitted_at) - Date.parse(b.submitted_at));
  if (!pending.length) return el.replaceChildren(emptyNote("Nothing waits: every submitted job is running.", "queue-empty"));
  el.replaceChildren(
    h(
      "table",
      { class: "table" },
      h("thead", {}, h("tr", {}, ["Job", "Project", "Owner", "GPUs", "Priority", "Waiting", "Why it waits"].map((t) => h("th", {}, t)))),
      h(
        "tbody",
        {},
        pending.map((job) =>
          h(
            "tr",
            { testid: "queue-row", dataset: { jobId: job.id } },
            h("td", {}, h("a", { href: `#/jobs/${job.id}` }, `#${job.id} `, h("span", { class: "job-name" }, job.name))),
            h("td", {}, job.project),
            h("td", {}, job.owner),
            h("td", { class: "num" }, asked(job)),
            h("td", {}, job.priority),
            h("td", { class: "num", title: `submitted ${fmtTime(job.submitted_at)}` }, fmtDuration(secondsSince(job.submitted_at))),
            h(
              "td",
              { class: "reason", testid: "queue-reason" },
              job.reason_code ? pill(job.reason_code, "wait", "reason-code") : null,
              h("span", { class: "reason-text" }, job.reason || "waiting for the next scheduling cycle"),
            ),
          ),
        ),
      ),
    ),
  );
}

function marker(kind, value, scale, label) {
  if (value === null || value === undefined) return null;
  return h("span", { class: `bar-marker marker-${kind}`, title: label, style: { left: `${Math.min(100, (100 * value) / scale)}%` } });
}

// A tree of projects (issue 34): each unit before its children, depth first, siblings in the
// API's (name) order; a project whose parent is not listed is a child of the root. A flat list
// keeps its order and every depth is 0.
function treeOrder(projects) {
  const names = new Set(projects.map((p) => p.name));
  const below = new Map();
  for (const p of projects) {
    const parent = p.parent && names.has(p.parent) ? p.parent : null;
    if (!below.has(parent)) below.set(parent, []);
    below.get(parent).push(p);
  }
  const out = [];
  const seen = new Set();
  const visit = (parent, depth) => {
    for (const p of below.get(parent) ?? []) {
      if (seen.has(p.name)) continue;
      seen.add(p.name);
      out.push({ p, depth, unit: below.has(p.name) });
      visit(p.name, depth + 1);
    }
  };
  visit(null, 0);
  return out;
}

function projectRow(p, scale, depth = 0, unit = false) {
  const pct = (v) => `${Math.min(100, (100 * v) / scale)}%`;
  const own = Math.min(p.allocated, p.quota);
  const borrowed = Math.max(0, p.allocated - p.quota);
  const facts = [
    unit ? `${fmtNum(p.allocated, 2)} held below` : `${fmtNum(p.allocated, 2)} held`,
    `quota ${fmtNum(p.quota, 2)}`,
    `fair share ${fmtNum(p.fair_share, 2)}`,
    `limit ${p.limit === null ? "none" : fmtNum(p.limit, 2)}`,
    p.pending_jobs ? `${p.pending_jobs} waiting (${fmtNum(p.pending, 2)} GPUs)` : null,
    p.idle_timeout_s != null ? `idle timeout ${fmtDuration(p.idle_timeout_s)}` : null,
  ].filter(Boolean);
  return h(
    "div",
    {
      class: unit ? "project-row project-unit" : "project-row",
      testid: "project-row",
      dataset: { project: p.name, depth: String(depth), parent: p.parent ?? "", unit: unit ? "1" : "0" },
    },
    h(
      "div",
      { class: "project-name", style: { paddingLeft: `${depth * 18}px` } },
      p.name,
      h("span", { class: "project-weight" }, `${unit ? "unit · " : ""}weight ${fmtNum(p.weight, 2)}`),
    ),
    h(
      "div",
      { class: "bar", title: facts.join(" · ") },
      h("span", { class: "bar-fill fill-own", style: { width: pct(own) } }),
      h("span", { class: "bar-fill fill-borrowed", style: { left: pct(own), width: pct(borrowed) } }),
      h("span", { class: "bar-fill fill-pending", style: { left: pct(p.allocated), width: pct(p.pending) } }),
      marker("quota", p.quota, scale, `quota ${p.quota}`),
      marker("fair", p.fair_share, scale, `fair share ${p.fair_share}`),
      marker("limit", p.limit, scale, `limit ${p.limit}`),
    ),
    h("div", { class: "project-facts", testid: "project-facts" }, facts.join(" · ")),
  );
}

export function renderProjects(el, projects) {
  if (!projects.length) return el.replaceChildren(emptyNote("No projects yet.", "projects-empty"));
  const scale = Math.max(1, ...projects.flatMap((p) => [p.allocated + p.pending, p.quota, p.fair_share, p.limit ?? 0]));
  el.replaceChildren(
    h(
      "div",
      { class: "bar-legend" },
      h("span", { class: "key fill-own" }), "held within quota",
      h("span", { class: "key fill-borrowed" }), "borrowed",
      h("span", { class: "key fill-pending" }), "waiting",
      h("span", { class: "key key-line marker-quota" }), "quota",
      h("span", { class: "key key-line marker-fair" }), "fair share",
      h("span", { class: "key key-line marker-limit" }), "limit",
      h("span", { class: "scale-note" }, `scale 0–${fmtNum(scale, 1)} GPUs`),
    ),
    ...treeOrder(projects).map(({ p, depth, unit }) => projectRow(p, scale, depth, unit)),
  );
}
