"""The `Content-Disposition` of a download, for any file name (RFC 6266, RFC 5987).

HTTP header values are Latin-1 bytes: a name such as `€.txt` cannot go in `filename="…"`
as is (Starlette's encoding failed: a 500). The name travels percent-encoded as UTF-8 in
`filename*`, which every current client prefers; `filename` keeps an ASCII stand-in (each
other character, quote and backslash an underscore) for the others.
"""

from __future__ import annotations

from urllib.parse import quote


def attachment(name: str) -> str:
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)
    encoded = quote(name, safe="")  # only RFC 5987 attr-chars left as they are
    return f"attachment; filename=\"{fallback or 'download'}\"; filename*=UTF-8''{encoded}"
