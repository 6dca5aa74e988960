"""Build the tool layer for one app: the stores tools keep state in, and the registry.

Called by the app factory (and `navi exec`); nothing is created at import. `ToolServices`
owns the two SQLite files of tool state (`<data_dir>/memory.sqlite3`,
`<data_dir>/notes.sqlite3`) and must be closed at shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runtime.policy.engine import PolicyEngine
from runtime.policy.plan_mode import PlanModes
from runtime.store.ids import TenantName
from runtime.store.shares import ShareStore
from runtime.tools.base import Tool
from runtime.tools.builtin import (
    BrowserTool,
    CodeExecTool,
    ContentPublishTool,
    EditFileTool,
    FilesystemTool,
    HttpRequestTool,
    ImageViewTool,
    ListProfilesTool,
    ListToolsTool,
    MemoryTool,
    NotebookEditTool,
    NotebookReadTool,
    ReadDocumentTool,
    ReflectTool,
    ScratchpadTool,
    ShareFileTool,
    SpawnAgentTool,
    SshExecTool,
    SwitchProfileTool,
    TerminalTool,
    TodoTool,
    ToolManualTool,
    WebSearchTool,
    WebViewTool,
)
from runtime.tools.builtin.ask_user import Asker, AskUserTool
from runtime.tools.builtin.kernel import KernelExecTool, KernelResetTool, Kernels
from runtime.tools.builtin.planning import plan_tools
from runtime.tools.builtin.processes import ProcessAccess, process_tools
from runtime.tools.builtin.profiles import ProfileDirectory
from runtime.tools.builtin.reflect import Reviewer
from runtime.tools.builtin.search import GlobTool, GrepTool, TreeTool
from runtime.tools.builtin.spawn import SubAgentRunner
from runtime.tools.cad import Model3DTool, Render3DTool, ScadLintTool
from runtime.tools.manuals import DEFAULT_MANUALS_DIR, ManualLibrary
from runtime.tools.mcp import McpCatalog, McpStatusTool
from runtime.tools.mcp.catalog import ExecutorLike
from runtime.tools.memory_store import MemoryStore
from runtime.tools.notes_store import NotesStore
from runtime.tools.registry import Approver, PolicyLike, ToolRegistry
from runtime.tools.user.catalog import UserToolCatalogs
from runtime.tools.user.lifecycle import (
    DeleteToolTool,
    ReloadToolsTool,
    ToolTestTool,
    WriteToolTool,
)
from runtime.tools.user.objects import TenantDisk
from runtime.tools.user.store import DEFAULT_SHIPPED_DIR, UserToolStore


@dataclass
class ToolServices:
    registry: ToolRegistry
    memory: MemoryStore
    notes: NotesStore
    user_tools: UserToolCatalogs
    processes: ProcessAccess = field(default_factory=ProcessAccess)  # bound by the app

    async def open(self) -> None:
        await self.memory.open()
        await self.notes.open()

    async def close(self) -> None:
        await self.memory.close()
        await self.notes.close()


def build_tools(
    data_dir: Path,
    *,
    policy: PolicyLike | None = None,
    approver: Approver | None = None,
    shipped_dir: Path | None = DEFAULT_SHIPPED_DIR,
    manuals_dir: Path = DEFAULT_MANUALS_DIR,
    executor: ExecutorLike | None = None,
    search_url: str | None = None,
    profiles: ProfileDirectory | None = None,
    subagents: SubAgentRunner | None = None,
    tenant_disk: TenantDisk | None = None,
    shares: ShareStore | None = None,
    reviewer: Reviewer | None = None,
    questions: Asker | None = None,
    plan_modes: PlanModes | None = None,
    kernels: Kernels | None = None,
) -> ToolServices:
    """Every built-in tool, wired to its stores, in a registry that asks `policy`;
    `tenant_disk` keeps the tenant disk quota user tools' copies count in; `shares` keeps
    the links of `share_file`/`content_publish`, `reviewer` answers `reflect`, `questions`
    carries `ask_user`'s questions to the session's user."""
    data_dir = Path(data_dir)
    memory = MemoryStore.in_data_dir(data_dir)
    notes = NotesStore.in_data_dir(data_dir)
    catalogs = UserToolCatalogs(UserToolStore(data_dir, shipped_dir, disk=tenant_disk))
    # the policy's MCP servers; listing them runs through `executor` (none: no MCP tools)
    mcp = McpCatalog(lambda: policy.policy.mcp_servers if isinstance(policy, PolicyEngine)
                     else {}, executor)
    processes = ProcessAccess()  # the app binds its ProcessService once it exists
    registry = ToolRegistry(
        mcp=mcp,
        policy=policy,
        user_tools=catalogs,
        approver=approver,
        manuals=ManualLibrary(manuals_dir),
    )
    def share_quota(tenant: TenantName) -> int:
        engine = policy if isinstance(policy, PolicyEngine) else None
        return engine.quotas(tenant).shares_per_tenant if engine else 100

    tools: list[Tool] = [
        CodeExecTool(),
        TerminalTool(processes),
        *process_tools(processes),
        FilesystemTool(),
        EditFileTool(),
        GrepTool(),
        GlobTool(),
        TreeTool(),
        NotebookReadTool(),
        NotebookEditTool(),
        ReadDocumentTool(),
        TodoTool(notes),
        ScratchpadTool(notes),
        MemoryTool(memory),
        ListToolsTool(registry),
        ToolManualTool(registry),
        ImageViewTool(),
        WriteToolTool(catalogs, registry.builtin_names),
        ToolTestTool(catalogs, registry.off_loop),
        ReloadToolsTool(catalogs),
        DeleteToolTool(catalogs),
        Model3DTool(),
        ScadLintTool(),
        Render3DTool(),
        HttpRequestTool(),
        WebViewTool(),
        BrowserTool(),
        WebSearchTool(search_url),
        SshExecTool(),
        McpStatusTool(mcp),
        ListProfilesTool(profiles),
        SwitchProfileTool(profiles),
        SpawnAgentTool(subagents),
        ShareFileTool(shares, share_quota),
        ContentPublishTool(shares, share_quota),
        ReflectTool(reviewer),
        AskUserTool(questions),
        *plan_tools(plan_modes, notes),
        KernelExecTool(kernels),
        KernelResetTool(kernels),
    ]
    for tool in tools:
        registry.register(tool)
    return ToolServices(registry=registry, memory=memory, notes=notes, user_tools=catalogs,
                        processes=processes)
