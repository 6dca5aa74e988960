// Model text as Markdown, made safe. The model's output is untrusted: marked turns it into
// HTML in which any raw HTML the text carries is escaped (shown as text, never parsed), then
// DOMPurify keeps only a small allow-list of tags and attributes and hands back a detached
// fragment (nothing is assigned to innerHTML of a live node). Links open in a new tab without
// a referrer; Markdown images become links (the CSP allows only this origin and blob: images,
// so a remote picture could not load anyway). Code blocks get a language label and a copy
// button, and are highlighted by highlight.js when their language is one it knows; its HTML
// (spans with hljs-* classes around escaped text) goes through DOMPurify too. The libraries
// are vendored: see ../vendor/VENDORED.md.

import { Marked } from "../vendor/marked/marked.esm.js";
import DOMPurify from "../vendor/dompurify/purify.es.js";
import hljs from "../vendor/highlight/highlight.min.js";
import { h } from "./dom.js";

const ALLOWED_TAGS = ["a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4",
  "h5", "h6", "hr", "input", "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td",
  "th", "thead", "tr", "ul"];
const ALLOWED_ATTR = ["href", "title", "class", "start", "align", "type", "checked",
  "disabled"];
const SAFE_URL = /^(?:https?:|mailto:|#)/i;
const LANGUAGE_CLASS = /^language-[\w+#.-]{1,32}$/;
// highlight.js's token classes: "hljs-keyword", "hljs-title function_", "language-css"
const HIGHLIGHT_CLASS = /^(?:hljs-[a-z-]{1,32}|language-[\w+#.-]{1,32})(?: [a-z]{1,16}_{1,2}){0,3}$/;
const HIGHLIGHT_MAX_CHARS = 100000; // larger blocks stay plain: highlighting them would stall
const COPIED_MS = 1500;

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    // Raw HTML in the model's text is shown as the text it is.
    html({ text }) {
      return escapeHtml(text);
    },
    image({ href, text }) {
      const label = `image: ${text || href || ""}`;
      return href ? `<a href="${escapeHtml(href)}">[${escapeHtml(label)}]</a>`
        : `[${escapeHtml(label)}]`;
    },
  },
});

const purify = DOMPurify(window);
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") || "";
    if (!SAFE_URL.test(href)) node.removeAttribute("href");
    else if (!href.startsWith("#")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer nofollow");
    }
  }
  if (node.hasAttribute && node.hasAttribute("class")) {
    const cls = node.getAttribute("class");
    const keep = (node.tagName === "CODE" && LANGUAGE_CLASS.test(cls))
      || (node.tagName === "SPAN" && HIGHLIGHT_CLASS.test(cls));
    if (!keep) node.removeAttribute("class");
  }
  if (node.tagName === "INPUT") {
    // Only GFM task-list boxes come this far (raw HTML was escaped); they cannot be ticked.
    node.setAttribute("type", "checkbox");
    node.setAttribute("disabled", "");
  }
});

const CONFIG = {
  ALLOWED_TAGS, ALLOWED_ATTR, ALLOW_DATA_ATTR: false, ALLOW_ARIA_ATTR: false,
  ALLOWED_URI_REGEXP: SAFE_URL, RETURN_DOM_FRAGMENT: true,
};
const HIGHLIGHT_CONFIG = {
  ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"], ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false, RETURN_DOM_FRAGMENT: true,
};

// Colour the text of `code` as `lang` (a name or alias highlight.js knows); false, and the
// block left as it was, for an unknown language or a very large block.
export function highlightCode(code, lang) {
  const text = code.textContent;
  if (!lang || text.length > HIGHLIGHT_MAX_CHARS || !hljs.getLanguage(lang)) return false;
  let html;
  try {
    html = hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
  } catch {
    return false;
  }
  code.replaceChildren(purify.sanitize(html, HIGHLIGHT_CONFIG));
  code.classList.add("hljs");
  return true;
}

// Markdown text -> a sanitised DocumentFragment, ready to append.
export function renderMarkdown(text) {
  let html;
  try {
    html = marked.parse(String(text ?? ""), { async: false });
  } catch {
    const fallback = document.createDocumentFragment();
    fallback.append(h("p", { text: String(text ?? "") }));
    return fallback;
  }
  const fragment = purify.sanitize(html, CONFIG);
  for (const pre of fragment.querySelectorAll("pre")) decorateCode(pre);
  return fragment;
}

// A <pre> becomes a code block with a bar: its language and a copy button.
export function decorateCode(pre, { label = null, copy = null } = {}) {
  const code = pre.querySelector("code") || pre;
  const match = /language-([\w+#.-]+)/.exec(code.getAttribute("class") || "");
  const lang = label || (match ? match[1] : "");
  const button = copyButton(() => copy ?? code.textContent, "Copy code");
  const bar = h("div", { class: "code-bar" },
    h("span", { class: "code-lang", text: lang || "text" }), button);
  const block = h("div", { class: "code-block" });
  pre.replaceWith(block);
  block.append(bar, pre);
  highlightCode(code, lang);
  return block;
}

export function copyButton(getText, label = "Copy") {
  const button = h("button", { type: "button", class: "copy", "aria-label": label,
    title: label, text: "Copy" });
  let timer = null;
  button.addEventListener("click", async () => {
    const ok = await copyText(getText());
    button.textContent = ok ? "Copied" : "Copy failed";
    button.classList.toggle("done", ok);
    clearTimeout(timer);
    timer = setTimeout(() => {
      button.textContent = "Copy";
      button.classList.remove("done");
    }, COPIED_MS);
  });
  return button;
}

// The clipboard API needs a secure context (https, or loopback); elsewhere the old
// select-and-copy path still works from a click.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // fall through to the selection copy
    }
  }
  const area = h("textarea", { class: "copy-buffer", readonly: true, "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}
