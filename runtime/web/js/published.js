// What share_file and content_publish made, where it belongs: a published file inline under
// its tool card (images as <img>, Markdown through markdown.js, PDF in a frame, HTML in a
// frame sandboxed without allow-same-origin, on an origin of its own, whose server answer
// carries a CSP that allows it no network), a shared link with a Copy button, and the
// session's live links beside its files (with Revoke). Links need no token: the token is in
// their path.

import { describeError } from "./api.js";
import { copyButton, renderMarkdown } from "./markdown.js";
import { h, clear, formatTime, toast } from "./dom.js";
import { SessionListing } from "./session_listing.js";

const LINK_PATH = /^\/v1\/(shared|published)\/[A-Za-z0-9_-]{20,128}$/;

function absolute(url) {
  return new URL(url, window.location.origin).href;
}

// A tool result's links (`published`, `shared`) appended to `container`.
export function renderLinks(container, result) {
  const published = result && result.published;
  if (published && LINK_PATH.test(String(published.url))) {
    container.append(publishedView(published));
  }
  const shared = result && result.shared;
  if (shared && LINK_PATH.test(String(shared.url))) container.append(sharedView(shared));
}

function publishedView(item) {
  const url = String(item.url);
  const path = String(item.path || "");
  const body = h("div", { class: "published-body" });
  const figure = h("figure", { class: `published published-${item.kind}`,
    "aria-label": `Published ${path}` }, body,
  h("figcaption", {}, h("span", { text: path }), " ",
    h("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: "Open" })));
  if (item.kind === "image") {
    body.append(h("img", { src: url, alt: `Published image ${path}`, class: "preview" }));
  } else if (item.kind === "markdown") {
    body.classList.add("markdown");
    fetch(url, { credentials: "omit", cache: "no-store" })
      .then((resp) => (resp.ok ? resp.text() : Promise.reject(new Error(String(resp.status)))))
      .then((text) => body.append(renderMarkdown(text)))
      .catch(() => body.append(h("p", { class: "card-error", text: `Could not load ${path}` })));
  } else if (item.kind === "pdf") {
    body.append(h("iframe", { src: url, title: `PDF ${path}`, class: "published-frame",
      referrerpolicy: "no-referrer" }));
  } else if (item.kind === "html") {
    // the server moves an HTML page to an origin of its own (the preview origin, allowed by
    // this page's frame-src), never this one; allow-scripts WITHOUT allow-same-origin: an
    // opaque origin, no cookies, no storage; the answer's own CSP (sandbox, connect-src
    // 'none') holds even if the frame is opened alone
    body.append(h("iframe", { src: url, title: `Page ${path}`, class: "published-frame",
      sandbox: "allow-scripts", referrerpolicy: "no-referrer" }));
  }
  return figure;
}

function sharedView(item) {
  const href = absolute(String(item.url));
  const expires = typeof item.expires_at === "number"
    ? ` · expires ${formatTime(item.expires_at)}` : "";
  return h("div", { class: "shared-link", "aria-label": `Shared link for ${item.path}` },
    h("span", { class: "muted", text: `Shared ${item.path}${expires}: ` }),
    h("a", { href, target: "_blank", rel: "noopener noreferrer", text: href,
      class: "shared-url" }),
    copyButton(() => href, "Copy link"));
}

// The session's live links, under its files: kind, path, downloads, expiry, Revoke.
export class SharesList extends SessionListing {
  constructor(root, api) {
    super(api);
    this.list = h("ul", { class: "file-list share-list", id: "share-list" });
    this.title = h("h3", { text: "Shared links", id: "shares-title" });
    this.el = h("section", { class: "shares", "aria-labelledby": "shares-title", hidden: true },
      this.title, this.list);
    root.append(this.el);
  }

  base() {
    return `/v1/sessions/${encodeURIComponent(this.session)}/shares`;
  }

  // listFailed: nothing to say, the files panel says when the session cannot be read

  render(rows) {
    clear(this.list);
    this.el.hidden = rows.length === 0;
    for (const row of rows) {
      const expires = row.expires_at ? ` · until ${formatTime(row.expires_at)}` : "";
      const revoke = h("button", { type: "button", class: "danger subtle", text: "Revoke",
        "aria-label": `Revoke the link to ${row.path}` });
      revoke.addEventListener("click", () => this.revoke(row));
      this.list.append(h("li", { class: "file share", dataset: { shareId: row.id } },
        h("div", { class: "file-line" },
          h("span", { class: "file-name", text: row.path, title: row.path }),
          h("span", { class: "file-meta",
            text: `${row.kind === "share" ? "download" : "published"} · ` +
              `${row.downloads} view${row.downloads === 1 ? "" : "s"}${expires}` })),
        h("div", { class: "actions" }, revoke)));
    }
  }

  async revoke(row) {
    try {
      await this.api.del(`${this.base()}/${encodeURIComponent(row.id)}`);
      toast(`Revoked the link to ${row.path}`);
    } catch (err) {
      toast(`Revoke failed: ${describeError(err)}`, "error");
    }
    this.refresh();
  }
}
