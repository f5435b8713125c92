"""The house's import rules (DESIGN.md, Layout), read from the sources with `ast`: imports run down only
(nodes -> engines -> inputs, core), an engine uses another only through its public names (the
package), nothing in utils/ imports nodes/, and no two files import each other, directly or through
others (imports inside functions count: a lazy import is still a dependency)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("gpu_rendering", "gpu_graph", "gpu_curves", "color_optimizer", "mesh_rasterizer")
LAYER = {"core": 0, "inputs": 1, **{name: 2 for name in ENGINES}}  # utils' own front ends (CLI) are 3


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports(path: Path) -> set[str]:
    """Every module of the pack that `path` imports, as dotted names from the repository root."""
    name, is_package = module_name(path)
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            stem = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from . import x` may name a submodule
                sub = f"{stem}.{alias.name}"
                found.add(sub if _exists(sub) else stem)
    return {m for m in found if m}


def _exists(module: str) -> bool:
    path = ROOT / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    files = [p for folder in ("utils", "nodes") for p in (ROOT / folder).rglob("*.py")]
    return {module_name(p)[0]: imports(p) for p in files}


def layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    if parts[0] == "nodes":
        return "nodes", 4
    if len(parts) == 1:  # utils/__init__.py
        return "utils", 3
    return parts[1], LAYER.get(parts[1], 3)


def test_utils_never_imports_nodes():
    bad = [(m, t) for m, targets in graph().items() if m.startswith("utils") for t in targets if t.startswith("nodes")]
    assert not bad, bad


def test_imports_run_down_and_engines_meet_through_public_names():
    bad = []
    for module, targets in graph().items():
        home, level = layer(module)
        for target in targets:
            if not target.startswith("utils."):
                continue
            where, target_level = layer(target)
            if where == home:
                continue
            # engines meet through public names (below); utils' front ends (CLI, datasets, warm-up) may use each other
            if target_level > level or (target_level == level and level not in (2, 3)):
                bad.append(f"{module} -> {target} (upward or sideways)")
            elif target_level == 2 and level <= 3 and target != f"utils.{where}" and home != "utils":
                bad.append(f"{module} -> {target} (another engine's private module: use the package)")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    edges = graph()
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target == node or target not in edges:
                continue
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    # a package's __init__ re-exporting its own modules is not a cycle unless a module imports the package
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
