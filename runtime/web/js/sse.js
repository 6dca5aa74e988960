// Server-Sent Events over fetch() + a ReadableStream parser, because EventSource cannot send
// an Authorization header. Reconnects with backoff and resumes with `Last-Event-ID`.

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 8000;
const FATAL = new Set([401, 403, 404]);

export class EventStream {
  // onEvent(data, id) per frame; onState(state, detail): connecting|open|reconnecting|failed.
  constructor({ url, token, lastEventId = null, onEvent, onState = () => {} }) {
    this.url = url;
    this.token = token;
    this.lastEventId = lastEventId;
    this.onEvent = onEvent;
    this.onState = onState;
    this.stopped = false;
    this.controller = null;
  }

  start() {
    this.stopped = false;
    this.loop();
    return this;
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async loop() {
    let delay = RETRY_MIN_MS;
    let first = true;
    while (!this.stopped) {
      this.onState(first ? "connecting" : "reconnecting");
      first = false;
      this.controller = new AbortController();
      try {
        const headers = { Authorization: `Bearer ${this.token}`, Accept: "text/event-stream" };
        if (this.lastEventId !== null) headers["Last-Event-ID"] = String(this.lastEventId);
        const resp = await fetch(this.url, {
          headers, signal: this.controller.signal, cache: "no-store",
        });
        if (FATAL.has(resp.status)) {
          this.onState("failed", resp.status);
          return;
        }
        if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
        this.onState("open");
        delay = RETRY_MIN_MS;
        await this.read(resp.body);
      } catch {
        // dropped or refused: retry below unless stopped
      }
      if (this.stopped) return;
      this.onState("reconnecting");
      await sleep(delay);
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  }

  async read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new SseParser((data, id) => {
      if (id !== null) this.lastEventId = id;
      this.onEvent(data, this.lastEventId);
    }, (id) => {
      this.lastEventId = id;
    });
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || this.stopped) return;
        parser.feed(value);
      }
    } finally {
      reader.releaseLock();
    }
  }
}

// The text/event-stream format: lines split on CRLF, LF or CR; `data:` lines joined with "\n";
// a blank line dispatches; `id:` sets the last event id; lines starting with ":" are comments.
export class SseParser {
  constructor(onMessage, onId = () => {}) {
    this.onMessage = onMessage;
    this.onId = onId;
    this.buffer = "";
    this.skipLF = false;
    this.data = [];
    this.id = null;
  }

  feed(text) {
    if (!text) return;
    // A chunk that ended in CR ended a line; an LF starting the next chunk completes that CRLF.
    if (this.skipLF && text.startsWith("\n")) text = text.slice(1);
    this.skipLF = false;
    this.buffer += text;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) return;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      if (match[0] === "\r" && this.buffer === "") this.skipLF = true;
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }

  dispatch() {
    const id = this.id !== null && /^\d+$/.test(this.id) ? Number(this.id) : null;
    const data = this.data;
    this.data = [];
    this.id = null;
    if (data.length === 0) {
      if (id !== null) this.onId(id);
      return;
    }
    let parsed;
    try {
      parsed = JSON.parse(data.join("\n"));
    } catch {
      return;
    }
    if (parsed && typeof parsed === "object") this.onMessage(parsed, id);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
