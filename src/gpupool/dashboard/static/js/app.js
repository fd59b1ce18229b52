// The dashboard's entry point: sign-in, hash routing (#/, #/gpu/NODE/INDEX, #/jobs/ID) and one
// refresh loop for the view on screen. Views update their DOM in place, so a refresh never
// blanks the page; a view that is replaced stops its loop (a generation counter). An action
// (actions.js) asks for a refresh at once with the event "gpupool:refresh".

import { describe, dismissActions, whoami } from "./actions.js";
import { auth, AuthError, takeTokenFromFragment } from "./api.js";
import { mountJob } from "./job.js";
import { mountOverview } from "./overview.js";

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);
const app = { gen: 0, view: null, route: null };

function parseRoute() {
  const path = location.hash.replace(/^#/, "") || "/";
  let m = /^\/jobs\/(\d+)$/.exec(path);
  if (m) return { name: "job", id: Number(m[1]) };
  m = /^\/gpu\/([^/]+)\/(\d+)$/.exec(path);
  if (m) return { name: "overview", gpu: { node: decodeURIComponent(m[1]), index: Number(m[2]) } };
  return { name: "overview", gpu: null };
}

function showSignIn(message) {
  app.gen += 1;
  app.view = null;
  dismissActions();
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("session").hidden = true;
  $("signin").hidden = false;
  const error = $("signin-error");
  error.textContent = message || "";
  error.hidden = !message;
  $("signin-token").focus();
}

function setUpdated(text, bad) {
  const el = $("updated");
  el.textContent = text;
  el.classList.toggle("bad", Boolean(bad));
}

// The loop's wait between refreshes, cut short by "gpupool:refresh" (one that comes during a
// refresh makes the next wait end at once).
let wake = null;
let woken = false;

function nap(ms) {
  if (woken) {
    woken = false;
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      if (wake === done) wake = null;
      resolve();
    };
    const timer = setTimeout(done, ms);
    wake = done;
  });
}

window.addEventListener("gpupool:refresh", () => {
  if (wake) wake();
  else woken = true;
});

async function refreshLoop(view, gen) {
  while (gen === app.gen) {
    if (document.hidden) {
      await new Promise((resolve) => document.addEventListener("visibilitychange", resolve, { once: true }));
      continue;
    }
    try {
      await view.refresh();
      if (gen !== app.gen) return;
      setUpdated(`updated ${new Date().toLocaleTimeString([], { hour12: false })}`);
    } catch (err) {
      if (gen !== app.gen) return;
      if (err instanceof AuthError) return showSignIn(err.message);
      const text = err instanceof TypeError ? "cannot reach the head; retrying" : err.message;
      setUpdated(text, true);
    }
    await nap(view.interval);
  }
}

async function showWho() {
  const token = auth.token;
  $("who").textContent = "";
  try {
    const who = await whoami();
    if (auth.token === token) $("who").textContent = describe(who);
  } catch (err) {
    if (err instanceof AuthError && auth.token === token) showSignIn(err.message);
  }
}

function route() {
  takeTokenFromFragment();
  if (!auth.token) return showSignIn("");
  const next = parseRoute();
  if (!$("signin").hidden || $("session").hidden) {
    $("signin").hidden = true;
    $("nav").hidden = false;
    $("session").hidden = false;
    showWho();
  }
  // Between #/ and #/gpu/..., the overview stays: only its chart panel follows the route.
  if (app.view && app.route?.name === "overview" && next.name === "overview") {
    app.route = next;
    app.view.select(next.gpu);
    return;
  }
  app.gen += 1;
  app.route = next;
  const container = $("view");
  app.view = next.name === "job" ? mountJob(container, next.id) : mountOverview(container, next.gpu);
  window.scrollTo(0, 0);
  refreshLoop(app.view, app.gen);
}

function signIn(event) {
  event.preventDefault();
  const input = $("signin-token");
  if (!input.value.trim()) return;
  auth.set(input.value);
  input.value = "";
  app.route = null;
  route();
}

// uPlot (npm, copied into vendor/ by scripts/install.sh) is optional: without it, no charts.
function loadCharts() {
  const script = document.createElement("script");
  script.src = "vendor/uPlot.iife.min.js";
  script.onload = () => {
    const css = document.createElement("link");
    css.rel = "stylesheet";
    css.href = "vendor/uPlot.min.css";
    document.head.append(css);
    window.dispatchEvent(new Event("gpupool:charts"));
  };
  document.head.append(script);
}

function scrollToSection(event) {
  const name = event.target.dataset.section;
  if (!name) return;
  event.preventDefault();
  const go = () => document.getElementById(`section-${name}`)?.scrollIntoView({ behavior: "smooth" });
  if (app.route?.name === "overview") go();
  else {
    location.hash = "#/";
    setTimeout(go, 300);
  }
}

$("signin-form").addEventListener("submit", signIn);
$("sign-out").addEventListener("click", () => {
  auth.clear();
  showSignIn("Signed out.");
});
$("nav").addEventListener("click", scrollToSection);
window.addEventListener("gpupool:signed-out", (event) => showSignIn(event.detail));
window.addEventListener("hashchange", route);
loadCharts();
route();
