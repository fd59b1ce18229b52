// The job page (#/jobs/ID): the job's fields, placements and events, refreshed every couple of
// seconds, and its live log: GET /logs?worker=W&offset=N from the last offset, appended as text,
// until the head says X-Gpupool-Finished: 1. A worker selector follows another worker of a gang.
// "Cancel job" shows where the signed-in user may cancel it (actions.js).

import { cancelControl, whoami } from "./actions.js";
import { ApiError, AuthError, getJson, request } from "./api.js";
import { emptyNote, fmtDuration, fmtGiB, fmtNum, fmtTime, h, pill, secondsSince, sleep, stateKind } from "./dom.js";

const INTERVAL_MS = 2000;
const LOG_LIMIT = 2_000_000; // characters kept on screen; older output is dropped from the top

// The argument vector as a shell would need it typed: a job's command never runs through a shell,
// but people read and copy it.
function shellWords(argv) {
  return argv.map((a) => (a !== "" && /^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`)).join(" ");
}

function facts(job) {
  const ran = job.started_at ? fmtDuration(((job.finished_at ? Date.parse(job.finished_at) : Date.now()) - Date.parse(job.started_at)) / 1000) : "–";
  const rows = [
    ["Project", job.project],
    ["Owner", job.owner],
    ["Priority", job.priority],
    ["GPUs", job.max_workers ? `${fmtNum(job.gpus, 2)} per worker × ${job.placements.length} workers (elastic, ${job.workers} to ${job.max_workers})` : job.workers > 1 ? `${fmtNum(job.gpus, 2)} per worker × ${job.workers} workers` : fmtNum(job.gpus, 2)],
    ["CPUs / memory", `${job.cpus || "any"} / ${job.memory_mib ? fmtGiB(job.memory_mib) : "no limit"}`],
    ["Submitted", `${fmtTime(job.submitted_at)} (${fmtDuration(secondsSince(job.submitted_at))} ago)`],
    ["Started", fmtTime(job.started_at)],
    ["Finished", fmtTime(job.finished_at)],
    ["Ran for", ran],
    ["Exit code", job.exit_code ?? "–"],
    ["Restarts", `${job.restarts} of ${job.max_restarts}`],
    ["Work dir", job.workdir || "–"],
    ["Command", job.command == null ? "hidden: only its owner, a manager of its project or an admin sees it" : shellWords(job.command)],
  ];
  if (job.reason) rows.push(["Reason", `${job.reason_code ? `${job.reason_code}: ` : ""}${job.reason}`]);
  return rows.map(([k, v]) => h("div", { class: "fact", dataset: { fact: k.toLowerCase() } }, h("dt", {}, k), h("dd", {}, String(v))));
}

function placements(job) {
  if (!job.placements.length) return emptyNote("Not placed on any GPU yet.", "job-no-placements");
  return h(
    "table",
    { class: "table", testid: "job-placements" },
    h("thead", {}, h("tr", {}, ["Worker", "Node", "GPUs", "Share"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      job.placements.map((p) =>
        h(
          "tr",
          { testid: "placement-row" },
          h("td", { class: "num" }, p.worker),
          h("td", {}, h("a", { href: `#/gpu/${encodeURIComponent(p.node)}/${p.gpus[0] ?? 0}` }, p.node)),
          h("td", {}, p.gpus.length ? p.gpus.join(", ") : "none"),
          h("td", {}, p.gpu_share ? `${Math.round(p.gpu_share * 100)}%` : "whole"),
        ),
      ),
    ),
  );
}

function events(job) {
  if (!job.events.length) return emptyNote("No events yet.");
  return h(
    "table",
    { class: "table events", testid: "job-events" },
    h("thead", {}, h("tr", {}, ["Time", "Event", "Node", "Message"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      job.events.map((e) =>
        h(
          "tr",
          { testid: "event-row", dataset: { kind: e.kind } },
          h("td", { class: "nowrap" }, fmtTime(e.time)),
          h("td", {}, h("span", { class: "event-kind" }, e.kind)),
          h("td", {}, e.node || ""),
          h("td", {}, e.message),
        ),
      ),
    ),
  );
}

// An elastic job's width over time (issue 35): a step line of how many workers ran, from the
// job's `width` points, up to now while it runs. A table stands in where uPlot is missing.
function widthChart(box, job, previous) {
  const points = job.width || [];
  box.closest("section").hidden = !job.max_workers;
  if (!job.max_workers) return null;
  box.dataset.points = String(points.length);
  box.dataset.widths = points.map((p) => p.workers).join(",");
  const xs = points.map((p) => Date.parse(p.time) / 1000);
  const ys = points.map((p) => p.workers);
  if (points.length && !job.finished_at) {
    xs.push(Date.now() / 1000);
    ys.push(ys[ys.length - 1]);
  }
  if (!window.uPlot) {
    box.replaceChildren(emptyNote(points.map((p) => `${fmtTime(p.time)}: ${p.workers}`).join(" · ") || "Not started yet."));
    return null;
  }
  if (previous) {
    previous.setData([xs, ys]);
    return previous;
  }
  box.replaceChildren();
  const axis = { stroke: "#8b96a8", grid: { stroke: "#232c39", width: 1 }, ticks: { stroke: "#232c39", width: 1 } };
  const options = {
    width: Math.max(240, box.clientWidth - 16),
    height: 150,
    legend: { show: true, live: true },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y: { range: [0, job.max_workers + 0.5] } },
    series: [{}, { label: "Workers", stroke: "#5aa9e6", width: 1.6, fill: "#5aa9e622", paths: window.uPlot.paths.stepped({ align: 1 }) }],
    axes: [{ ...axis }, { ...axis, size: 40, values: (u, vals) => vals.map((v) => (Number.isInteger(v) ? v : "")) }],
  };
  return new window.uPlot(options, [xs, ys], box);
}

export function mountJob(container, id) {
  const title = h("h1", { testid: "job-title" }, `Job #${id}`);
  const state = h("span");
  const actionBox = h("span", { class: "job-actions" });
  const factList = h("dl", { class: "facts", testid: "job-facts" });
  const placementBox = h("div");
  const eventBox = h("div");
  const widthBox = h("div", { class: "chart", testid: "job-width" });
  let widthPlot = null;
  const workerSelect = h("select", { testid: "log-worker", "aria-label": "worker" });
  const logStatus = h("span", { class: "log-status", testid: "log-status" }, "connecting…");
  const log = h("pre", { class: "log", testid: "job-log" });
  let workers = 0;
  let follow = 0;

  container.replaceChildren(
    h("a", { class: "back", href: "#/" }, "← Cluster"),
    h("div", { class: "job-head" }, title, state, actionBox),
    h("section", { class: "panel" }, factList),
    h("div", { class: "two-col" }, h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Placements")), placementBox), h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Events")), eventBox)),
    h("section", { class: "panel", hidden: true }, h("div", { class: "panel-head" }, h("h2", {}, "Width (elastic)")), widthBox),
    h("section", { class: "panel", testid: "job-logs" }, h("div", { class: "panel-head" }, h("h2", {}, "Log"), h("div", { class: "panel-tools" }, logStatus, workerSelect)), log),
  );

  function append(text) {
    if (!text) return;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    log.append(text);
    if (log.textContent.length > LOG_LIMIT) log.textContent = log.textContent.slice(-LOG_LIMIT / 2);
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  // One follower at a time: changing the worker (or leaving the page) ends the previous one.
  async function followLog(worker) {
    const mine = ++follow;
    const decoder = new TextDecoder();
    let offset = 0;
    log.replaceChildren();
    while (mine === follow && log.isConnected) {
      let response;
      try {
        response = await request(`/api/v1/jobs/${id}/logs?worker=${worker}&offset=${offset}`);
      } catch (err) {
        if (err instanceof AuthError) return;
        if (err instanceof ApiError && err.status === 403) {
          logStatus.textContent = `log: ${err.message}`; // not the caller's to read: no retries
          return;
        }
        logStatus.textContent = `log: ${err.message}; retrying`;
        await sleep(2000);
        continue;
      }
      const bytes = await response.arrayBuffer();
      if (mine !== follow) return;
      append(decoder.decode(bytes, { stream: true }));
      offset = Number(response.headers.get("X-Gpupool-Next-Offset") ?? offset + bytes.byteLength);
      if (response.headers.get("X-Gpupool-Finished") === "1") {
        append(decoder.decode());
        logStatus.textContent = "finished";
        logStatus.dataset.finished = "1";
        if (!log.textContent) log.append("(no output)");
        return;
      }
      logStatus.textContent = offset ? `following · ${offset.toLocaleString()} bytes` : "waiting for output…";
      if (!bytes.byteLength) await sleep(1000);
    }
  }

  function setWorkers(n) {
    if (n === workers) return;
    workers = n;
    workerSelect.replaceChildren(...Array.from({ length: n }, (_, i) => h("option", { value: i }, `worker ${i}`)));
    workerSelect.hidden = n < 2;
  }
  workerSelect.addEventListener("change", () => followLog(Number(workerSelect.value)));

  async function refresh() {
    let job;
    let who;
    try {
      [job, who] = await Promise.all([getJson(`/api/v1/jobs/${id}`), whoami()]);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        title.textContent = `Job #${id}`;
        actionBox.replaceChildren();
        factList.replaceChildren(emptyNote(err.message, "job-missing"));
        return;
      }
      throw err;
    }
    title.replaceChildren(`#${job.id} `, h("span", { class: "job-name" }, job.name));
    state.replaceChildren(pill(job.state, stateKind(job.state), "job-state"));
    actionBox.replaceChildren(cancelControl(job, who) ?? "");
    factList.replaceChildren(...facts(job));
    placementBox.replaceChildren(placements(job));
    eventBox.replaceChildren(events(job));
    widthPlot = widthChart(widthBox, job, widthPlot);
    document.title = `#${job.id} ${job.name} · gpupool`;
    if (!workers) {
      setWorkers(job.max_workers || job.workers);
      followLog(0);
    }
  }

  return { refresh, interval: INTERVAL_MS };
}
