// Preview links of a session's ports. "Open preview" asks the API for a link and opens it in
// a new tab: the link is an origin of its own (never this page's), carries no token of ours,
// and the tab gets no `opener` to reach back into this page.

import { describeError } from "./api.js";
import { h, toast } from "./dom.js";

export async function openPreview(api, sessionId, port) {
  const tab = window.open("about:blank", "_blank"); // before the await, or it is a popup
  try {
    const link = await api.post(
      `/v1/sessions/${encodeURIComponent(sessionId)}/previews`, { port });
    if (tab) {
      tab.opener = null;
      tab.location.replace(link.url);
    } else {
      window.open(link.url, "_blank", "noopener,noreferrer");
    }
  } catch (err) {
    if (tab) tab.close();
    toast(`Preview failed: ${describeError(err)}`, "error");
  }
}

// One "Open preview" button per declared port of a running process.
export function previewButtons(api, sessionId, row) {
  return (row.ports || []).map((port) => {
    const button = h("button", { type: "button", class: "subtle preview",
      text: row.ports.length > 1 ? `Open preview :${port}` : "Open preview",
      "aria-label": `Open preview of port ${port}` });
    button.addEventListener("click", () => openPreview(api, sessionId, port));
    return button;
  });
}
