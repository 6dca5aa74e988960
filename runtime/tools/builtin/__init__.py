"""The built-in tools (each module one family; they run no code but through the Executor)."""

from runtime.tools.builtin.browser import BrowserTool
from runtime.tools.builtin.document import ReadDocumentTool
from runtime.tools.builtin.edit import EditFileTool
from runtime.tools.builtin.exec import CodeExecTool, TerminalTool
from runtime.tools.builtin.filesystem import FilesystemTool
from runtime.tools.builtin.image_view import ImageViewTool
from runtime.tools.builtin.memory import MemoryTool
from runtime.tools.builtin.meta import ListToolsTool, ToolManualTool
from runtime.tools.builtin.notebook import NotebookEditTool, NotebookReadTool
from runtime.tools.builtin.notes import ScratchpadTool, TodoTool
from runtime.tools.builtin.profiles import ListProfilesTool, SwitchProfileTool
from runtime.tools.builtin.reflect import ReflectTool
from runtime.tools.builtin.share import ContentPublishTool, ShareFileTool
from runtime.tools.builtin.spawn import SpawnAgentTool
from runtime.tools.builtin.ssh import SshExecTool
from runtime.tools.builtin.web import HttpRequestTool, WebSearchTool, WebViewTool

__all__ = [
    "BrowserTool",
    "CodeExecTool",
    "ContentPublishTool",
    "EditFileTool",
    "FilesystemTool",
    "HttpRequestTool",
    "ImageViewTool",
    "ListProfilesTool",
    "ListToolsTool",
    "MemoryTool",
    "NotebookEditTool",
    "NotebookReadTool",
    "ReadDocumentTool",
    "ReflectTool",
    "ScratchpadTool",
    "ShareFileTool",
    "SpawnAgentTool",
    "SshExecTool",
    "SwitchProfileTool",
    "TerminalTool",
    "TodoTool",
    "ToolManualTool",
    "WebSearchTool",
    "WebViewTool",
]
