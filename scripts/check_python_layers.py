"""Fails when the Python package breaks its layers: a library module importing the CLI, or an
import circle among the modules of xdl_trace (the Python half of the layer check;
cmake/CheckIncludeLayers.cmake checks the C++ include rules of cpp/include/README.md).

    python3 scripts/check_python_layers.py [ROOT]   # ROOT holds xdl_trace/ (default: this tree)

The rules:
- The CLI (xdl_trace/cli.py, xdl_trace/__main__.py) is the top floor: it imports the library;
  no other module imports it.
- Two wings: the write side (xdl_trace/write/: what a training script calls, the capture) and the
  read side (xdl_trace/read/: reader, analysis, report, timeline) never import each other; both
  stand on the top's shared modules (errors, _core, _proto, _version), and the package's
  __init__, the CLI and the integrations (dask) stand on them.
- No import circles: the graph of imports between xdl_trace's own modules has no cycle.
- No private names across modules: no module takes another's ``_name`` (``from .reader import
  _x`` or ``reader._x``); what two modules share has a public name in the lower one. Private
  modules (``_core``, ``_run``, ...) are fine to import: the rule is about their names' users.

Every import counts, wherever it is written: at the top of a module, inside a function (a lazy
import still closes a circle), and a module named by a string to importlib.import_module or
__import__. An import of a module's own parent package is not an edge (Python runs the package's
__init__ first anyway); a name that is no .py file of the tree (the compiled _core, a class)
is an attribute of its package, not an edge. Exit 1 and one line per break, naming file and line.
"""

import ast
import os
import sys

PACKAGE = "xdl_trace"
CLI = {"xdl_trace.cli", "xdl_trace.__main__"}
WINGS = ("xdl_trace.write", "xdl_trace.read")
_IMPORTERS = {"import_module", "__import__"}  # importlib.import_module, __import__


def _modules(root):
    """{module name: path} of every .py file under ROOT/xdl_trace."""
    modules = {}
    for directory, subdirs, files in os.walk(os.path.join(root, PACKAGE)):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, root)[: -len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_package(module, modules):
    return modules[module].endswith("__init__.py")


def _resolve(module, modules, level, name):
    """The absolute name of `name` imported with `level` dots from `module`."""
    if level == 0:
        return name
    base = module.split(".")
    if not _is_package(module, modules):
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _targets(module, modules, node):
    """The modules of the tree that one AST node imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        source = _resolve(module, modules, node.level, node.module)
        names = [
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
            for alias in node.names
        ]
    elif (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) in _IMPORTERS
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        text = node.args[0].value
        level = len(text) - len(text.lstrip("."))
        names = [_resolve(module, modules, level, text[level:]) if level else text]
    else:
        return []
    found = []
    for name in names:
        while name and name not in modules:  # `import a.b.c` of a module a.b: the edge is a.b.
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            found.append(name)
    return found


def _wing(module):
    """The wing (xdl_trace.write or xdl_trace.read) that `module` belongs to, or None."""
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(module, modules, tree):
    """[(line, "module._name")] of the names private to another module of the tree that
    `module` takes, by ``from .m import _x`` or by ``m._x`` on a name bound to a module."""
    bound, uses = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, modules, node.level, node.module)
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in modules:
                    bound[alias.asname or alias.name] = full
                elif (  # From a package, a private name is a module of it (the compiled _core).
                    source in modules
                    and source != module
                    and not _is_package(source, modules)
                    and _private(alias.name)
                ):
                    uses.append((node.lineno, full))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and bound[node.value.id] != module
            and _private(node.attr)
        ):
            uses.append((node.lineno, f"{bound[node.value.id]}.{node.attr}"))
    return uses


def _graph(root):
    """({module: {imported module: first line}}, {module: path}, {module: private uses})."""
    modules = _modules(root)
    graph, private = {}, {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        edges = graph.setdefault(module, {})
        for node in ast.walk(tree):
            for target in _targets(module, modules, node):
                edges.setdefault(target, node.lineno)
        private[module] = _private_uses(module, modules, tree)
    return graph, modules, private


def _circles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle(graph, component):
    """One cycle through the first module of `component`: [m0, m1, ..., m0]."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]]):
            if w == start:
                return path + [start]
            if w in members and w not in seen:
                seen.add(w)
                paths.append(path + [w])
    return component + [start]  # Not reached: a component of 2+ modules has a cycle.


def check(root):
    """The breaks of the tree at `root`, one line each (empty: the layers hold)."""
    graph, modules, private = _graph(root)
    problems = []
    for module, uses in sorted(private.items()):
        for line, name in sorted(set(uses)):
            problems.append(
                f"{os.path.relpath(modules[module], root)}:{line}: {module} takes {name}, "
                "a name private to its module: give what modules share a public name"
            )
    for module, edges in sorted(graph.items()):
        if module in CLI:
            continue
        for target, line in sorted(edges.items()):
            if target in CLI:
                problems.append(
                    f"{os.path.relpath(modules[module], root)}:{line}: {module} imports "
                    f"{target}: the CLI is the top floor, no library module imports it"
                )
    for module, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            here, there = _wing(module), _wing(target)
            if here and there and here != there:
                problems.append(
                    f"{os.path.relpath(modules[module], root)}:{line}: {module} imports "
                    f"{target}: the write and read wings never import each other; what both "
                    "need lives at the top of the package (errors, _core, _proto)"
                )
    for component in _circles(graph):
        cycle = _cycle(graph, component)
        where = ", ".join(
            f"{os.path.relpath(modules[a], root)}:{graph[a][b]}" for a, b in zip(cycle, cycle[1:])
        )
        problems.append(f"import circle: {' -> '.join(cycle)} ({where})")
    return problems


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(__file__)))
    problems = check(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"python layers: {len(problems)} break(s) under {root}", file=sys.stderr)
        return 1
    print(f"python layers ok under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
