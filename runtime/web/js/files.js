// The session's files: list, upload (raw bytes), download (fetched with the token, saved
// through a blob URL), delete (asks once more), and images shown inline from blob URLs.

import { segment, describeError } from "./api.js";
import { h, clear, formatBytes, formatTime, toast } from "./dom.js";
import { SessionListing } from "./session_listing.js";

const IMAGE_TYPES = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif",
  webp: "image/webp" };
const PREVIEW_MAX_BYTES = 8 * 1024 * 1024;

export class FilesPanel extends SessionListing {
  constructor(root, api) {
    super(api);
    this.urls = [];
    this.list = root.querySelector("#file-list");
    this.status = root.querySelector("#files-status");
    this.form = root.querySelector("#upload-form");
    this.input = root.querySelector("#upload-input");
    this.folder = root.querySelector("#upload-folder");
    this.refreshButton = root.querySelector("#files-refresh");
    this.form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.upload();
    });
    this.refreshButton.addEventListener("click", () => this.refresh());
  }

  base() {
    return `/v1/sessions/${encodeURIComponent(this.session)}/files`;
  }

  listFailed(err) {
    this.status.textContent = `Could not list files: ${describeError(err)}`;
  }

  render(entries) {
    for (const url of this.urls) URL.revokeObjectURL(url);
    this.urls = [];
    clear(this.list);
    entries.sort((a, b) => String(a.path).localeCompare(String(b.path)));
    this.status.textContent = entries.length
      ? `${entries.length} file${entries.length === 1 ? "" : "s"}` : "No files yet.";
    for (const entry of entries) this.list.append(this.row(entry));
  }

  row(entry) {
    const path = String(entry.path);
    const name = h("span", { class: "file-name", text: path, title: path });
    const meta = h("span", { class: "file-meta",
      text: `${formatBytes(entry.size)} · ${formatTime(entry.mtime)}` });
    const download = h("button", { type: "button", text: "Download",
      "aria-label": `Download ${path}` });
    const remove = h("button", { type: "button", class: "danger subtle", text: "Delete",
      "aria-label": `Delete ${path}` });
    download.addEventListener("click", () => this.download(path));
    remove.addEventListener("click", () => this.confirmDelete(remove, path));
    const item = h("li", { class: "file", dataset: { path } },
      h("div", { class: "file-line" }, name, meta),
      h("div", { class: "actions" }, download, remove));
    const type = imageType(path);
    if (type && entry.size <= PREVIEW_MAX_BYTES) this.preview(item, path, type);
    return item;
  }

  async preview(item, path, type) {
    const session = this.session;
    try {
      const url = await imageUrl(this.api, session, path, type);
      this.urls.push(url);
      if (session !== this.session) return;
      item.append(h("img", { class: "preview", src: url, alt: `Preview of ${path}`,
        loading: "lazy" }));
    } catch {
      // no preview; the row still offers the download
    }
  }

  async download(path) {
    try {
      const blob = await this.api.blob(`${this.base()}/${segment(path)}`);
      const url = URL.createObjectURL(blob);
      const link = h("a", { href: url, download: path.split("/").pop() || "download",
        hidden: true });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      toast(`Download failed: ${describeError(err)}`, "error");
    }
  }

  confirmDelete(button, path) {
    if (button.dataset.armed !== "1") {
      button.dataset.armed = "1";
      button.textContent = "Confirm delete";
      button.classList.remove("subtle");
      setTimeout(() => {
        if (button.isConnected) {
          button.dataset.armed = "";
          button.textContent = "Delete";
          button.classList.add("subtle");
        }
      }, 5000);
      return;
    }
    this.remove(path);
  }

  async remove(path) {
    try {
      await this.api.del(`${this.base()}/${segment(path)}`);
      toast(`Deleted ${path}`);
    } catch (err) {
      toast(`Delete failed: ${describeError(err)}`, "error");
    }
    this.refresh();
  }

  async upload() {
    const files = Array.from(this.input.files || []);
    if (!files.length) {
      toast("Choose a file to upload first.", "error");
      this.input.focus();
      return;
    }
    const folder = this.folder.value.trim().replace(/^\/+|\/+$/g, "");
    for (const file of files) {
      const path = folder ? `${folder}/${file.name}` : file.name;
      this.status.textContent = `Uploading ${path}…`;
      try {
        await this.api.request("PUT", `${this.base()}/${segment(path)}`, {
          body: file, headers: { "Content-Type": "application/octet-stream" },
        });
        toast(`Uploaded ${path}`);
      } catch (err) {
        toast(`Upload of ${path} failed: ${describeError(err)}`, "error");
      }
    }
    this.form.reset();
    this.refresh();
  }
}

// A workspace image as a blob URL (fetched with the token); the caller owns the URL.
export async function imageUrl(api, sessionId, path, type = null) {
  const blob = await api.blob(
    `/v1/sessions/${encodeURIComponent(sessionId)}/files/${segment(path)}`);
  const media = type && /^image\/(png|jpeg|gif|webp)$/.test(type) ? type : imageType(path);
  if (!media) throw new Error("not an image");
  return URL.createObjectURL(new Blob([blob], { type: media }));
}

// The images a call wrote: files whose mtime lies in [since, until] (server times, seconds),
// small enough to preview. A little slack covers the filesystem's coarse clock.
const MTIME_SLACK_S = 0.05;

export async function writtenImages(api, sessionId, since, until) {
  const entries = await api.get(`/v1/sessions/${encodeURIComponent(sessionId)}/files`);
  return (Array.isArray(entries) ? entries : [])
    .filter((e) => typeof e.mtime === "number" && e.mtime >= since - MTIME_SLACK_S
      && e.mtime <= until + MTIME_SLACK_S && e.size <= PREVIEW_MAX_BYTES
      && imageType(String(e.path)))
    .sort((a, b) => String(a.path).localeCompare(String(b.path)))
    .map((e) => ({ path: String(e.path), media_type: imageType(String(e.path)) }));
}

function imageType(path) {
  const ext = path.split(".").pop().toLowerCase();
  return IMAGE_TYPES[ext] || null;
}
