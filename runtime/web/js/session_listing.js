// A panel that lists something of the open session (its files, its shared links): shown for
// one session at a time, refreshed on demand or, when many events ask at once, coalesced.
// Subclasses give base() (the listing's URL) and render(rows); listFailed(err) is optional.

export class SessionListing {
  constructor(api) {
    this.api = api;
    this.session = null;
    this.pending = null;
  }

  show(sessionId) {
    this.session = sessionId;
    this.refresh();
  }

  refreshSoon() {
    if (this.pending) return;
    this.pending = setTimeout(() => {
      this.pending = null;
      this.refresh();
    }, 300);
  }

  async refresh() {
    if (!this.session) return;
    const session = this.session;
    let rows;
    try {
      rows = await this.api.get(this.base());
    } catch (err) {
      this.listFailed(err);
      return;
    }
    if (session !== this.session) return; // another session was opened meanwhile
    this.render(Array.isArray(rows) ? rows : []);
  }

  listFailed(_err) {}
}
