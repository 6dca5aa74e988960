"""Stateful Python kernels: names that live between executes of a session.

`KernelService` (``service``) is the entry point for the tools, the API and the E2B code
interpreter; ``backend`` runs executes in the kernels' containers (``container``), which run
``runner.py`` (IPython's shell in the container, spoken to over its stdio); ``state`` is
what a session's disk keeps of them; ``models`` the typed vocabulary.
"""

from runtime.kernels.models import (
    DEFAULT_KERNEL,
    KernelError,
    KernelExecuteBody,
    KernelInfo,
    KernelResult,
    check_kernel_name,
    result_text,
)
from runtime.kernels.service import KernelService

__all__ = ["DEFAULT_KERNEL", "KernelError", "KernelExecuteBody", "KernelInfo", "KernelResult",
           "KernelService", "check_kernel_name", "result_text"]
