// Small DOM helpers. Every piece of text goes in through textContent (never innerHTML): tool
// output, file names and model text are untrusted.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, ...children);
  return el;
}

export function append(parent, ...children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

export function formatBytes(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "?";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB"];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function formatTime(value) {
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return String(value ?? "");
  return date.toLocaleString();
}

export function shortId(id) {
  return typeof id === "string" && id.length > 14 ? `${id.slice(0, 12)}…` : String(id ?? "");
}

// Transient notices; the container is an aria-live region.
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  if (!box) return;
  const item = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : null },
    message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

export function capitalize(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
