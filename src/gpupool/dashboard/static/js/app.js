// The dashboard's entry point: sign-in, hash routing (#/, #/gpu/NODE/INDEX, #/jobs/ID) and one
// refresh loop for the view on screen. Views update their DOM in place, so a refresh never
// blanks the page; a view that is replaced stops its loop (a generation counter).

import { auth, AuthError, getJson, takeTokenFromFragment } from "./api.js";
import { sleep } from "./dom.js";
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
    await sleep(view.interval);
  }
}

async function showWho() {
  const token = auth.token;
  try {
    const who = await getJson("/api/v1/whoami");
    $("who").textContent = `${who.user} · ${who.role}`;
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
window.addEventListener("hashchange", route);
loadCharts();
route();
