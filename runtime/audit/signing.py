"""The Ed25519 key that signs audit checkpoints, and the checkpoint payload itself.

The private key lives in ``<data_dir>/keys/audit-ed25519.pem`` (mode 0600, created at first
start, never overwritten); the public key is written next to it as ``audit-ed25519.pub`` so
an auditor can copy it elsewhere and verify with ``navi audit verify --public-key``. A
checkpoint pins (seq, hash) of the chain head: removing records after it, or rewriting the
chain up to it, no longer verifies. Anyone who can write the data dir *and* the key can
forge; keep a copy of the public key (and ideally of recent checkpoints) off the host.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict

from runtime.audit.records import canonical_json, sha256_hex
from runtime.errors import AuditUnavailable, ConfigError
from runtime.logging import get_logger

log = get_logger(__name__)
PRIVATE_NAME = "audit-ed25519.pem"
PUBLIC_NAME = "audit-ed25519.pub"


class Checkpoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    hash: str
    ts: str
    key_id: str
    signature: str

    def payload(self) -> bytes:
        return _payload(self.seq, self.hash, self.ts, self.key_id)


def _payload(seq: int, head_hash: str, ts: str, key_id: str) -> bytes:
    return canonical_json(
        {"purpose": "navi-audit-checkpoint", "seq": seq, "hash": head_hash, "ts": ts,
         "key_id": key_id}
    ).encode()


def _key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_hex(raw)[:16]


class Verifier:
    """Checks checkpoint signatures with a public key."""

    def __init__(self, public: Ed25519PublicKey) -> None:
        self.public = public
        self.key_id = _key_id(public)

    @classmethod
    def from_file(cls, path: Path) -> Verifier:
        try:
            data = path.read_bytes()
            key = serialization.load_pem_public_key(data)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read public key {path}: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"{path} is not an Ed25519 public key")
        return cls(key)

    def check(self, cp: Checkpoint) -> bool:
        if cp.key_id != self.key_id:
            return False
        try:
            self.public.verify(base64.b64decode(cp.signature, validate=True), cp.payload())
        except (InvalidSignature, ValueError):
            return False
        return True


class Signer(Verifier):
    def __init__(self, private: Ed25519PrivateKey) -> None:
        super().__init__(private.public_key())
        self._private = private

    @classmethod
    def load_or_create(cls, keys_dir: Path) -> Signer:
        """Load the signing key, creating it (0600, in a 0700 dir) on first start."""
        try:
            keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = keys_dir / PRIVATE_NAME
            if not path.exists():
                private = Ed25519PrivateKey.generate()
                pem = private.private_bytes(serialization.Encoding.PEM,
                                            serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption())
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(pem)
                    fh.flush()
                    os.fsync(fh.fileno())
                log.info("audit_key_created", path=str(path))
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                log.warning("audit_key_mode_fixed", path=str(path), mode=oct(mode))
                os.chmod(path, 0o600)
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except OSError as exc:
            raise AuditUnavailable(f"audit signing key unavailable: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(f"audit signing key {path} is unreadable: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"{path} is not an Ed25519 private key")
        signer = cls(key)
        pub_path = keys_dir / PUBLIC_NAME
        pem_pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
        try:
            if not pub_path.exists() or pub_path.read_bytes() != pem_pub:
                pub_path.write_bytes(pem_pub)
        except OSError as exc:
            raise AuditUnavailable(f"cannot write public key: {exc.strerror}") from None
        return signer

    def sign(self, seq: int, head_hash: str, ts: str) -> Checkpoint:
        signature = self._private.sign(_payload(seq, head_hash, ts, self.key_id))
        return Checkpoint(seq=seq, hash=head_hash, ts=ts, key_id=self.key_id,
                          signature=base64.b64encode(signature).decode())


def load_verifier(data_dir: Path, public_key: Path | None = None) -> Verifier | None:
    """The verifier for a data dir: an explicit public key, else the one in `keys/`."""
    if public_key is not None:
        return Verifier.from_file(public_key)
    keys = data_dir / "keys"
    if (keys / PUBLIC_NAME).exists():
        return Verifier.from_file(keys / PUBLIC_NAME)
    if (keys / PRIVATE_NAME).exists():
        try:
            key = serialization.load_pem_private_key((keys / PRIVATE_NAME).read_bytes(), None)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read audit key: {exc}") from None
        if isinstance(key, Ed25519PrivateKey):
            return Verifier(key.public_key())
    return None
