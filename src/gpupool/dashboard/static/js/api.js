// Talking to the head: every data call carries the bearer token; the token lives in this tab's
// sessionStorage only (not localStorage: closing the tab signs out), and reaches the page
// through the URL fragment, which browsers never send to a server.

const KEY = "gpupool.token";

export class AuthError extends Error {}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const auth = {
  get token() {
    return sessionStorage.getItem(KEY);
  },
  set(token) {
    sessionStorage.setItem(KEY, token.trim());
  },
  clear() {
    sessionStorage.removeItem(KEY);
  },
};

// `#token=...` (what `gpupool dashboard` prints): keep the token, then drop it from the address
// bar and the history so it is neither shown nor bookmarked.
export function takeTokenFromFragment() {
  const match = /^#token=([^&]+)/.exec(location.hash);
  if (!match) return;
  auth.set(decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
}

async function errorOf(response) {
  try {
    const body = await response.json();
    return [String(body.code), String(body.message)];
  } catch {
    return ["http_error", `HTTP ${response.status}`];
  }
}

// A 401 means the token is missing, wrong or revoked: forget it, so the sign-in form shows.
// `optional`: an endpoint this head may not have yet (404 answers null, the caller hides it).
// `method` and `body` (sent as JSON): the actions (cancel, drain, undrain).
export async function request(path, { optional = false, method = "GET", body } = {}) {
  const token = auth.token;
  if (!token) throw new AuthError("Sign in with a gpupool token.");
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 401) {
    const [, message] = await errorOf(response);
    if (auth.token === token) auth.clear(); // not a newer token signed in meanwhile
    throw new AuthError(message);
  }
  if (optional && response.status === 404) return null;
  if (!response.ok) {
    const [code, message] = await errorOf(response);
    throw new ApiError(response.status, code, message);
  }
  return response;
}

export async function getJson(path, options) {
  const response = await request(path, options);
  return response === null ? null : response.json();
}

export async function postJson(path, body) {
  const response = await request(path, { method: "POST", body });
  return response.json();
}
