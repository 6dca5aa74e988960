// The control API over fetch(). The bearer token travels only in the Authorization header,
// never in a URL. Errors come back as ApiError carrying the envelope's code and message.

const TOKEN_KEY = "navi.token";

export class ApiError extends Error {
  constructor(status, code, message, details = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export const tokenStore = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (token) => sessionStorage.setItem(TOKEN_KEY, token),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

export function segment(path) {
  // A workspace path as URL path segments: each part encoded, slashes kept.
  return String(path).split("/").map(encodeURIComponent).join("/");
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  }

  async raw(method, path, { json, body, headers = {}, signal } = {}) {
    const init = { method, headers: this.headers(headers), signal, cache: "no-store" };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers["Content-Type"] = "application/json";
    } else if (body !== undefined) {
      init.body = body;
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      if (err && err.name === "AbortError") throw err;
      throw new ApiError(0, "network_error", "the server could not be reached");
    }
    if (!resp.ok) throw await errorFrom(resp);
    return resp;
  }

  async request(method, path, options = {}) {
    const resp = await this.raw(method, path, options);
    if (resp.status === 204) return null;
    const type = resp.headers.get("content-type") || "";
    return type.includes("application/json") ? resp.json() : resp.text();
  }

  get(path, options) {
    return this.request("GET", path, options);
  }

  post(path, json, options = {}) {
    return this.request("POST", path, { ...options, json });
  }

  del(path) {
    return this.request("DELETE", path);
  }

  async blob(path) {
    const resp = await this.raw("GET", path);
    return resp.blob();
  }
}

async function errorFrom(resp) {
  let code = "http_error";
  let message = `${resp.status} ${resp.statusText}`;
  let details = {};
  try {
    const body = await resp.json();
    if (body && body.error) {
      code = String(body.error.code || code);
      message = String(body.error.message || message);
      details = body.error;
    }
  } catch {
    // not JSON: keep the status line
  }
  const retry = resp.headers.get("retry-after");
  if (retry) details = { ...details, retry_after: retry };
  return new ApiError(resp.status, code, message, details);
}

export function describeError(err) {
  if (err instanceof ApiError) {
    const rule = err.details && err.details.rule ? ` (rule ${err.details.rule})` : "";
    const retry = err.details && err.details.retry_after
      ? ` Retry after ${err.details.retry_after} s.` : "";
    return `${err.message}${rule}.${retry}`.replace(/\.\./g, ".");
  }
  return err && err.message ? err.message : String(err);
}
