// A kernel execute's results (kernel_exec), shown inline in its tool card: PNG figures as
// images (through blob URLs: the CSP allows no data: images), HTML (pandas tables) rebuilt as
// tables of text, and text as text.
//
// The HTML is never handed to the browser's parser (a parse would already evaluate inline
// styles and handlers against the CSP): it is read as a stream of tags and text, and only
// table elements and a few text-level ones are made, with createElement and text nodes. No
// attribute, script, style or link can come through.

import { h } from "./dom.js";

const MAX_RESULTS = 20;
const MAX_NODES = 20000;
const KEPT = new Set(["table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "p",
  "br", "b", "i", "strong", "em", "code", "pre", "span", "div", "small"]);
const SKIPPED = new Set(["script", "style", "template", "textarea", "title", "iframe",
  "object", "svg", "math", "noscript", "xmp", "noembed", "noframes"]);
const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: "\"", apos: "'", nbsp: "\u00a0" };

function decode(text) {
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (all, name) => {
    if (name[0] === "#") {
      const code = name[1] === "x" || name[1] === "X" ? parseInt(name.slice(2), 16)
        : parseInt(name.slice(1), 10);
      return code > 0 && code < 0x110000 ? String.fromCodePoint(code) : "";
    }
    return ENTITIES[name.toLowerCase()] ?? all;
  });
}

// HTML text -> a DocumentFragment of table elements and text only.
export function tableFragment(html) {
  const root = document.createDocumentFragment();
  const stack = [root];
  const tokens = /<!--[\s\S]*?-->|<(\/?)([a-zA-Z][a-zA-Z0-9-]*)[^>]*>|[^<]+|</g;
  let skipping = null;
  let nodes = 0;
  for (const match of String(html).matchAll(tokens)) {
    if (nodes++ > MAX_NODES) break;
    const [token, closing, rawName] = match;
    const name = rawName ? rawName.toLowerCase() : null;
    if (skipping) {
      if (name === skipping && closing) skipping = null;
      continue;
    }
    const top = stack[stack.length - 1];
    if (!name) {
      if (!token.startsWith("<!--")) top.append(document.createTextNode(decode(token)));
      continue;
    }
    if (SKIPPED.has(name)) {
      if (!closing && !token.endsWith("/>")) skipping = name;
      continue;
    }
    if (!KEPT.has(name)) continue;
    if (closing) {
      const at = stack.map((el) => el.nodeName && el.nodeName.toLowerCase()).lastIndexOf(name);
      if (at > 0) stack.length = at;
      continue;
    }
    const el = document.createElement(name);
    top.append(el);
    if (name !== "br") stack.push(el);
  }
  return root;
}

function pngUrl(b64) {
  const raw = atob(String(b64).replace(/\s+/g, ""));
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return URL.createObjectURL(new Blob([bytes], { type: "image/png" }));
}

function oneResult(item) {
  if (typeof item["image/png"] === "string") {
    try {
      return h("figure", { class: "kernel-result kernel-image" },
        h("img", { src: pngUrl(item["image/png"]), alt: item["text/plain"] || "Figure",
          class: "preview" }));
    } catch {
      return h("p", { class: "card-error", text: "Could not show a figure" });
    }
  }
  if (typeof item["text/html"] === "string") {
    const wrap = h("div", { class: "kernel-result kernel-html" });
    wrap.append(tableFragment(item["text/html"]));
    return wrap;
  }
  return h("pre", { class: "kernel-result kernel-text", text: String(item["text/plain"] ?? "") });
}

// `kernel`: the tool_result event's `kernel` field ({results, error, restored, lost, ...}).
export function renderKernelResults(where, kernel) {
  if (!kernel || typeof kernel !== "object") return;
  const box = h("div", { class: "kernel-results", "aria-label": "Kernel results" });
  const restored = Array.isArray(kernel.restored) ? kernel.restored : [];
  const lost = Array.isArray(kernel.lost) ? kernel.lost : [];
  if (restored.length || lost.length) {
    box.append(h("p", { class: "note", text: `Kernel restored: ${restored.join(", ") || "-"}`
      + (lost.length ? `; lost: ${lost.join(", ")}` : "") }));
  }
  const results = Array.isArray(kernel.results) ? kernel.results : [];
  for (const item of results.slice(0, MAX_RESULTS)) {
    if (item && typeof item === "object") box.append(oneResult(item));
  }
  const error = kernel.error;
  if (error && typeof error === "object" && Array.isArray(error.traceback)
      && error.traceback.length) {
    box.append(h("pre", { class: "kernel-result kernel-traceback",
      text: error.traceback.join("\n") }));
  }
  if (box.childElementCount) where.append(box);
}
