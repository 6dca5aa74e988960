"""Shipped example user tool: digests of a text (sha256 by default)."""

import hashlib

name = "hash_text"
description = "Compute a hex digest (sha256, sha1, md5, sha512 or blake2b) of a UTF-8 text."
parameters = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "algorithm": {
            "type": "string",
            "enum": ["sha256", "sha1", "md5", "sha512", "blake2b"],
            "default": "sha256",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}


async def execute(params):
    digest = hashlib.new(params.get("algorithm", "sha256"), params["text"].encode("utf-8"))
    return digest.hexdigest()
