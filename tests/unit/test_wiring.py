"""Dependencies are passed into constructors, never set on an object after it is made
(issue 43): the hooks that used to be set afterwards (`Nodes.placer`/`lookup`, now its
`placement`; `Workspaces.drop_containers`, `tenant_limit`, `count_also`;
`DockerBackend.may_launch`, `egress_denied`) are assigned only as `self.<hook>` in an
`__init__`, in `runtime/` and in the tests alike. Read from the source with `ast`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HOOKS = frozenset({"placer", "lookup", "placement", "drop_containers", "tenant_limit",
                   "count_also", "may_launch", "egress_denied", "elsewhere"})


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _flat(target)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        yield from _flat(node.target)


def _flat(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _flat(element)
    else:
        yield target


def late_hooks(source: str, name: str = "<source>") -> list[str]:
    """Where a hook is assigned other than as `self.<hook>` in an `__init__` (or set with
    `setattr`): `line: code`."""
    tree = ast.parse(source, name)
    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and target.attr in HOOKS:
                own = isinstance(target.value, ast.Name) and target.value.id == "self"
                if not (own and function == "__init__"):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in HOOKS:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def test_the_check_finds_a_hook_set_afterwards() -> None:
    """The check itself: a hook set on an object after it is made, or by a method other than
    `__init__`, is found; one taken in `__init__` is not."""
    source = '''
class Nodes:
    def __init__(self, placement):
        self.placement = placement
    def use(self, placement):
        self.placement = placement

nodes = Nodes(None)
nodes.placement = object()
spaces.drop_containers, backend.may_launch = print, print
setattr(backend, "egress_denied", None)
'''
    assert [line.split(":")[0] for line in late_hooks(source)] == ["6", "9", "10", "10", "11"]


def test_no_hook_is_set_after_construction() -> None:
    late = {f"{path.relative_to(ROOT)}:{where}"
            for folder in ("runtime", "tests", "bench")
            for path in sorted((ROOT / folder).rglob("*.py"))
            if path.name != "test_wiring.py"
            for where in late_hooks(path.read_text(), str(path))}
    assert sorted(late) == []
