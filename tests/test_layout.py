"""The layering: no import cycles among the project's modules, the library imports no trainer code,
and scripts do not import each other. Imports are read from the source (also those inside
functions), so a cycle hidden behind a local import is found too."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lightning_sched", "tasks", "callbacks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The project's modules `path` imports, anywhere in the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import module` names a module; `from module import name` names the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def project_graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {module_name(p) for p in files}
    return {module_name(p): imported_modules(p, known) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_no_import_cycle():
    graph = project_graph()
    assert "lightning_sched.deeprm.objectives" in graph["lightning_sched.deeprm.cluster"]  # the walk sees imports
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_cycle_finder_finds_a_planted_cycle():
    graph = project_graph()
    graph["lightning_sched.deeprm.state"] = graph["lightning_sched.deeprm.state"] | {"lightning_sched.deeprm.cluster"}
    assert find_cycle(graph) is not None


def test_library_imports_no_trainer_code():
    for module, imports in project_graph().items():
        if module.startswith("lightning_sched"):
            assert not [m for m in imports if m.split(".")[0] in ("tasks", "callbacks")], module


def test_only_the_cli_module_parses_command_lines():
    for path in (ROOT / "lightning_sched").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        # the parser class apart from cli (which imports torch): decide.py runs without torch
        parsers = ("lightning_sched.cli", "lightning_sched.script_parser")
        assert "argparse" not in names or module_name(path) in parsers, module_name(path)


def test_scripts_do_not_import_each_other():
    scripts = {p.stem for p in (ROOT / "scripts").glob("*.py")} - {"_common", "_checkout"}
    for path in (ROOT / "scripts").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            assert not set(names) & scripts, f"{path.name} imports {set(names) & scripts}"
