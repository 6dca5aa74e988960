"""A session's background processes: long-running commands, each in a hardened container
of its own, with an output log, stdin, signals, a monitor and adoption after a restart."""

from runtime.processes.kinds import ProcessKind
from runtime.processes.launch import LaunchExtras
from runtime.processes.models import (
    OutputPiece,
    ProcessInfo,
    ProcessOutput,
    ProcessRecord,
    StartSpec,
    WaitResult,
)
from runtime.processes.service import ProcessService

__all__ = ["LaunchExtras", "OutputPiece", "ProcessInfo", "ProcessKind", "ProcessOutput",
           "ProcessRecord", "ProcessService", "StartSpec", "WaitResult"]
