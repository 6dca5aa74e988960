// Images for the next message: pasted into the message box or dropped on the composer.
// Only PNG, JPEG, GIF and WebP, at most 4, each at most 5 MiB (the server checks the bytes
// again); each shows as a chip (a blob: preview, as the page's CSP allows) that can be
// removed before sending.

import { h } from "./dom.js";

const TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const MAX_IMAGES = 4;
const MAX_BYTES = 5 * 1024 * 1024;

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error || new Error("could not read the image"));
    reader.readAsDataURL(file);
  });
}

export class Attachments {
  constructor({ form, input, list, onProblem }) {
    this.list = list;
    this.onProblem = onProblem; // (message) for an image that is refused here
    this.items = []; // { name, mime, data }
    input.addEventListener("paste", (ev) => {
      const files = [...(ev.clipboardData?.files || [])].filter((f) => TYPES.has(f.type));
      if (files.length) {
        ev.preventDefault();
        this.add(files);
      }
    });
    form.addEventListener("dragover", (ev) => {
      if ([...(ev.dataTransfer?.items || [])].some((i) => i.kind === "file")) {
        ev.preventDefault();
        form.classList.add("dropping");
      }
    });
    form.addEventListener("dragleave", () => form.classList.remove("dropping"));
    form.addEventListener("drop", (ev) => {
      form.classList.remove("dropping");
      const files = [...(ev.dataTransfer?.files || [])];
      if (!files.length) return;
      ev.preventDefault();
      this.add(files);
    });
  }

  async add(files) {
    for (const file of files) {
      if (!TYPES.has(file.type)) {
        this.onProblem(`${file.name}: only PNG, JPEG, GIF or WebP images can be sent`);
      } else if (file.size > MAX_BYTES) {
        this.onProblem(`${file.name} is larger than 5 MiB`);
      } else if (this.items.length >= MAX_IMAGES) {
        this.onProblem(`at most ${MAX_IMAGES} images per message`);
      } else {
        this.items.push({ name: file.name || "image", mime: file.type,
          data: await base64Of(file), url: URL.createObjectURL(file) });
      }
    }
    this.render();
  }

  render() {
    this.list.replaceChildren(...this.items.map((item, index) => {
      const remove = h("button", { type: "button", class: "remove",
        "aria-label": `Remove ${item.name}`, text: "×" });
      remove.addEventListener("click", () => {
        URL.revokeObjectURL(item.url);
        this.items.splice(index, 1);
        this.render();
      });
      return h("span", { class: "attachment" },
        h("img", { src: item.url, alt: item.name }),
        h("span", { class: "name", text: item.name }), remove);
    }));
    this.list.hidden = this.items.length === 0;
  }

  take() {
    const images = this.items.map(({ mime, data }) => ({ data, mime }));
    for (const item of this.items) URL.revokeObjectURL(item.url);
    this.items = [];
    this.render();
    return images;
  }
}
