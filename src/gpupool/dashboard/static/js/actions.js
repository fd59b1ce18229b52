// What the signed-in user may do, and doing it. GET /api/v1/whoami says who the token speaks for
// (asked once per token); the page offers only the actions the head would allow: cancel on a job
// its owner, a manager of its project or an admin may act on, drain and undrain to admins, and
// nothing to a read-only token. The head enforces the same rules: a refusal (403) shows its message.
// Cancel and drain ask first, in an in-page dialog; after an action the view refreshes at once.

import { ApiError, AuthError, auth, getJson, postJson } from "./api.js";
import { h } from "./dom.js";

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);
const SCOPE_RANK = { read: 0, submit: 1, admin: 2 };
const FINISHED = new Set(["succeeded", "failed", "cancelled"]); // preempted and lost jobs wait to run again

let cached = null; // { token, promise }: one whoami per token; a failed one is asked again

export function whoami() {
  const token = auth.token;
  if (!cached || cached.token !== token) {
    const promise = getJson("/api/v1/whoami");
    cached = { token, promise };
    promise.catch(() => {
      if (cached?.promise === promise) cached = null;
    });
  }
  return cached.promise;
}

export function mayCancel(who, job) {
  if (!who || (SCOPE_RANK[who.scope] ?? 0) < SCOPE_RANK.submit) return false;
  return who.is_admin || job.owner === who.user || who.projects?.[job.project] === "manager";
}

export const mayDrain = (who) => Boolean(who?.is_admin);

export function describe(who) {
  return `${who.user} (${who.role})${who.scope === "read" ? " · read-only token" : ""}`;
}

// The notice under the top bar: what an action did, or the head's reason for refusing it.
let noticeTimer = null;

export function notify(text, kind) {
  const el = $("notice");
  clearTimeout(noticeTimer);
  $("notice-text").textContent = text;
  el.dataset.kind = kind;
  el.hidden = false;
  if (kind === "ok") noticeTimer = setTimeout(() => (el.hidden = true), 6000);
}

// The in-page confirmation: resolves { reason } when confirmed, null when not (Keep, Escape).
let settle = null;

function finish(value) {
  const resolve = settle;
  settle = null;
  const dialog = $("confirm");
  if (dialog.open) dialog.close();
  resolve?.(value);
}

function confirmAction({ text, ok, reason = false }) {
  finish(null);
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = ok;
  const input = $("confirm-reason");
  input.value = "";
  input.closest("label").hidden = !reason;
  dialog.showModal();
  (reason ? input : $("confirm-no")).focus();
  return new Promise((resolve) => {
    settle = resolve;
  });
}

export function dismissActions() {
  finish(null);
  clearTimeout(noticeTimer);
  $("notice").hidden = true;
}

async function act(path, body, done) {
  try {
    await postJson(path, body);
    notify(done, "ok");
  } catch (err) {
    if (err instanceof AuthError) {
      window.dispatchEvent(new CustomEvent("gpupool:signed-out", { detail: err.message }));
      return;
    }
    const why = err instanceof ApiError ? err.message : "cannot reach the head";
    notify(`Not done: ${why}`, "error");
    if (err instanceof ApiError && err.status === 403) cached = null; // what the user may do changed: ask again
  }
  window.dispatchEvent(new Event("gpupool:refresh"));
}

function button(label, testid, onClick, kind = "ghost") {
  const run = (event) => {
    event.stopPropagation(); // a button on a GPU tile must not also open the tile's history
    onClick();
  };
  return h("button", { type: "button", class: `action ${kind}`, testid, onclick: run, onkeydown: (e) => e.stopPropagation() }, label);
}

// Cancel, on a job the user may act on that has not finished; "cancelling" once asked.
export function cancelControl(job, who) {
  if (FINISHED.has(job.state) || !mayCancel(who, job)) return null;
  if (job.cancel_requested) return h("span", { class: "panel-note", testid: "job-cancelling" }, "cancelling…");
  return button("Cancel job", "job-cancel", async () => {
    const answer = await confirmAction({ text: `Cancel job #${job.id} (${job.name})? Its workers are stopped.`, ok: "Cancel job" });
    if (answer) await act(`/api/v1/jobs/${job.id}/cancel`, undefined, `Cancel requested for job #${job.id}.`);
  }, "danger");
}

// Drain or undrain a node (admins): draining asks first, and takes an optional reason.
export function nodeControl(node, who) {
  if (!mayDrain(who)) return null;
  const path = `/api/v1/nodes/${encodeURIComponent(node.name)}`;
  if (node.drain_requested || node.state === "draining" || node.state === "drained") {
    return button("Undrain", "node-undrain", () => act(`${path}/undrain`, {}, `${node.name} takes new jobs again.`));
  }
  return button("Drain", "node-drain", async () => {
    const text = `Drain ${node.name}? Its running jobs finish; nothing new starts there until it is undrained.`;
    const answer = await confirmAction({ text, ok: "Drain node", reason: true });
    if (answer) await act(`${path}/drain`, answer.reason ? { reason: answer.reason } : {}, `Drain requested for ${node.name}.`);
  });
}

// Take one GPU out of service or put it back (admins), from its tile.
export function gpuControl(node, gpu, who) {
  if (!mayDrain(who)) return null;
  const path = `/api/v1/nodes/${encodeURIComponent(node.name)}`;
  const where = `GPU ${gpu.index} of ${node.name}`;
  if (gpu.disabled) return button("Undrain GPU", "gpu-undrain", () => act(`${path}/undrain`, { gpu: gpu.index }, `${where} is back in service.`));
  return button("Drain GPU", "gpu-drain", async () => {
    const text = `Take ${where} out of service? A job on it runs on; nothing new is placed there.`;
    const answer = await confirmAction({ text, ok: "Drain GPU", reason: true });
    if (answer) {
      const body = answer.reason ? { gpu: gpu.index, reason: answer.reason } : { gpu: gpu.index };
      await act(`${path}/drain`, body, `${where} is out of service.`);
    }
  });
}

function wire() {
  $("confirm-ok").addEventListener("click", () => finish({ reason: $("confirm-reason").value.trim() }));
  $("confirm-no").addEventListener("click", () => finish(null));
  $("confirm").addEventListener("cancel", () => finish(null)); // Escape
  $("confirm-reason").addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      $("confirm-ok").click();
    }
  });
  $("notice-close").addEventListener("click", () => ($("notice").hidden = true));
}

wire();
