"""One module per `navi` sub-command; `runtime.cli` wires them together."""
