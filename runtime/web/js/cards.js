// One tool call as a card: arguments, live output (long output collapses to its last lines),
// then exit status, duration, badges, the audit seq, and the images the call wrote into the
// workspace. All text (arguments, output, errors) goes in through textContent.

import { h } from "./dom.js";
import { decorateCode } from "./markdown.js";
import { renderKernelResults } from "./kernel_results.js";
import { renderLinks } from "./published.js";

const OUTPUT_CAP = 200_000; // characters kept on screen per card; the full copy stays in files
const COLLAPSE_LINES = 14; // longer output starts collapsed to its tail
const COLLAPSE_CHARS = 2500; // (or this much text: long lines wrap)
const MAX_IMAGES = 6;

export class ToolCard {
  constructor({ tool, args, execId, startTs = null, loadImage = null, findWritten = null }) {
    this.tool = tool || "tool";
    this.loadImage = loadImage;
    this.findWritten = findWritten; // (since, until) -> Promise of [{path, size, mtime}]
    this.startTs = typeof startTs === "number" && Number.isFinite(startTs) ? startTs : null;
    this.lines = 0;
    this.expanded = false;
    this.images = h("div", { class: "card-images" });
    this.execId = execId || null;
    this.shown = 0;
    this.capped = false;
    this.finished = false;
    this.fromResult = false; // output taken whole from the result: later live chunks repeat it
    this.status = h("span", { class: "status running", text: "running…" });
    this.badges = h("span", { class: "badges" });
    this.output = h("pre", { class: "output", tabindex: "0", "aria-label": "Output",
      id: `out-${Math.random().toString(36).slice(2, 10)}` });
    this.toggle = h("button", { type: "button", class: "output-toggle subtle", hidden: true,
      "aria-expanded": "false", "aria-controls": this.output.id });
    this.toggle.addEventListener("click", () => this.setExpanded(!this.expanded));
    this.outputWrap = h("div", { class: "output-wrap", hidden: true }, this.output, this.toggle);
    this.footer = h("footer", { class: "card-meta" });
    this.subLog = h("ol", { class: "subagent-log", hidden: true, "aria-label": "Sub-agent steps" });
    this.error = h("p", { class: "card-error", hidden: true });
    this.el = h("article", {
      class: "card tool-card",
      "aria-label": `Tool call ${this.tool}`,
      dataset: { execId: this.execId || "", tool: this.tool },
    },
    h("header", { class: "card-head" },
      h("span", { class: "tool-name", text: this.tool }), this.status, this.badges),
    argsView(this.tool, args || {}),
    this.outputWrap, this.images, this.subLog, this.error, this.footer);
    this.renderFooter({});
  }

  // One step of a sub-agent this call started (spawn_agent): a line of text, never HTML.
  subagentStep(inner) {
    let line = null;
    if (inner.type === "stream_start") line = `sub-agent started (${inner.profile || "profile"})`;
    else if (inner.type === "tool_call") line = `→ ${inner.tool}`;
    else if (inner.type === "tool_result") {
      line = inner.success ? `✓ ${inner.tool}` : `✗ ${inner.tool}: ${inner.error || "failed"}`;
    } else if (inner.type === "stream_end") {
      line = `answer: ${String(inner.content || "").slice(0, 300)}`;
    } else if (inner.type === "error") line = `error: ${inner.message || inner.code}`;
    if (line === null) return;
    this.subLog.hidden = false;
    this.subLog.append(h("li", { text: line }));
  }

  appendOutput(stream, text) {
    if (!text || this.fromResult) return;
    this.outputWrap.hidden = false;
    if (this.capped) return;
    let chunk = String(text);
    if (this.shown + chunk.length > OUTPUT_CAP) {
      chunk = chunk.slice(0, Math.max(0, OUTPUT_CAP - this.shown));
      this.capped = true;
    }
    this.shown += chunk.length;
    this.lines += (chunk.match(/\n/g) || []).length;
    const last = this.output.lastElementChild;
    if (last && last.dataset.stream === stream) last.textContent += chunk;
    else this.output.append(h("span", { class: stream, dataset: { stream }, text: chunk }));
    if (this.capped) {
      this.output.append(h("span", { class: "note", text: "\n[display limit reached]" }));
    }
    this.updateCollapse();
  }

  // Long output shows its last lines (where programs put results and errors) until opened.
  updateCollapse() {
    const long = this.lines > COLLAPSE_LINES || this.shown > COLLAPSE_CHARS;
    if (!long) return;
    if (this.toggle.hidden) {
      this.toggle.hidden = false;
      this.setExpanded(false);
    }
    const total = this.lines + (this.output.textContent.endsWith("\n") ? 0 : 1);
    this.toggle.textContent = this.expanded ? "Collapse output"
      : `Show all ${total.toLocaleString()} lines`;
    if (!this.expanded) this.output.scrollTop = this.output.scrollHeight;
  }

  setExpanded(expanded) {
    this.expanded = expanded;
    this.outputWrap.classList.toggle("collapsed", !expanded);
    this.outputWrap.classList.toggle("expanded", expanded);
    this.toggle.setAttribute("aria-expanded", String(expanded));
    this.updateCollapse();
  }

  // `endTs`: server time the result was sent (events and history carry it).
  finish(result, endTs = null) {
    if (this.finished) return; // the event stream and the POST answer may both finish it
    this.finished = true;
    if (!this.execId && result.exec_id) {
      this.execId = result.exec_id;
      this.el.dataset.execId = result.exec_id;
    }
    const hasExit = Object.hasOwn(result, "exit_code") && result.exit_code !== undefined;
    const kernel = result.kernel || result.metadata?.kernel;
    // kernel_exec: its traceback is shown by renderKernelResults (below), not twice
    const kernelTraceback = Boolean(kernel?.error?.traceback?.length);
    if (this.shown === 0) {
      // Nothing streamed (not a program, or the live events were missed): show the result.
      if (result.stdout) this.appendOutput("stdout", result.stdout);
      if (result.stderr) this.appendOutput("stderr", result.stderr);
      if (!result.stdout && !result.stderr && result.output && !kernelTraceback) {
        this.appendOutput("stdout", result.output);
      }
      this.fromResult = this.shown > 0;
    }
    const ok = hasExit && result.exit_code !== null
      ? result.ok ?? (result.exit_code === 0 && !result.timed_out && !result.oom_killed)
      : Boolean(result.success ?? result.ok);
    let label;
    if (result.rule && result.success === false && !hasExit) label = "denied";
    else if (hasExit && result.exit_code !== null) label = `exit ${result.exit_code}`;
    else if (result.timed_out) label = "timed out";
    else label = ok ? "done" : "failed";
    this.status.textContent = label;
    this.status.className = `status ${ok ? "ok" : "fail"}`;
    for (const [flag, text] of [["timed_out", "timed out"], ["oom_killed", "out of memory"],
      ["truncated", "output truncated"]]) {
      if (result[flag]) this.badges.append(h("span", { class: `badge ${flag}`, text }));
    }
    const error = result.error || (result.code && result.message) || null;
    if (error && !ok) {
      // the rule of a call that ran is the one that allowed it: no part of its error
      const ran = hasExit && result.exit_code !== null;
      const rule = result.rule && !ran ? ` (rule ${result.rule})` : "";
      this.error.textContent = `${error}${rule}`;
      this.error.hidden = false;
    }
    this.renderFooter(result);
    renderLinks(this.images, result); // share_file's link, content_publish's view
    // kernel_exec: figures, tables (the event's `kernel`, or the exec answer's metadata)
    renderKernelResults(this.images, kernel);
    this.showImages(result, endTs);
  }

  // The images of a result (`images`, e.g. image_view's) and those the call wrote into the
  // workspace: files whose mtime lies between the call's start and its result, both server
  // times (the listing's mtime comes from the same host clock).
  async showImages(result, endTs) {
    if (!this.loadImage) return;
    const images = Array.isArray(result.images) ? [...result.images] : [];
    let since = this.startTs;
    if (since === null && typeof endTs === "number" && typeof result.duration_ms === "number") {
      since = endTs - result.duration_ms / 1000 - 1;
    }
    if (this.findWritten && since !== null) {
      try {
        const until = typeof endTs === "number" ? endTs : Infinity;
        for (const entry of await this.findWritten(since, until)) {
          if (!images.some((i) => i && i.path === entry.path)) images.push(entry);
        }
      } catch {
        // no listing: the card stays without pictures
      }
    }
    for (const image of images.slice(0, MAX_IMAGES)) {
      const path = image && typeof image.path === "string" ? image.path : "";
      if (!path) continue;
      try {
        const url = await this.loadImage(path, image.media_type);
        this.images.append(h("figure", {},
          h("img", { src: url, alt: `Image ${path}`, class: "preview" }),
          h("figcaption", { text: path })));
      } catch {
        this.images.append(h("p", { class: "card-error", text: `Could not load ${path}` }));
      }
    }
  }

  fail(message) {
    if (this.finished) return;
    this.finish({ success: false, error: message });
  }

  renderFooter(result) {
    const parts = [];
    if (typeof result.duration_ms === "number") parts.push(`${result.duration_ms} ms`);
    if (result.timeout_s) parts.push(`timeout ${result.timeout_s} s`);
    if (result.audit_seq !== undefined && result.audit_seq !== null) {
      parts.push(`audit #${result.audit_seq}`);
    }
    if (this.execId) parts.push(this.execId);
    this.footer.textContent = parts.join(" · ");
  }
}

function argsView(tool, args) {
  const wrap = h("details", { class: "args" }, h("summary", { text: "Arguments" }));
  if (typeof args.code === "string") {
    const lang = args.language ? `${args.language}` : "code";
    wrap.open = true;
    wrap.querySelector("summary").textContent = `Arguments (${lang})`;
    wrap.append(codeBlock(args.code, lang));
    const rest = { ...args };
    delete rest.code;
    delete rest.language;
    if (Object.keys(rest).length) wrap.append(h("pre", { text: pretty(rest) }));
  } else if (typeof args.command === "string" && Object.keys(args).length === 1) {
    wrap.open = true;
    wrap.querySelector("summary").textContent = "Command";
    wrap.append(codeBlock(`$ ${args.command}`, "shell", args.command)); // copied without "$ "
  } else {
    wrap.append(h("pre", { text: pretty(args) }));
  }
  return wrap;
}

function codeBlock(text, lang, copy = text) {
  const pre = h("pre", { class: "code", text });
  h("div", {}, pre); // decorateCode puts the block where the <pre> was
  return decorateCode(pre, { label: lang, copy });
}

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
