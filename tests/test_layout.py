"""The repository's layout: only the top-level entries in TOP_LEVEL (the project's chosen shape: entry
points, config, data, scripts, tests, docs and one package, trainer/, for the mechanisms), and imports
that flow one way through the floors (layers) trainer/__init__.py lists: nothing reaches up a floor,
and nothing imports in a cycle."""
import ast
import re
import subprocess

import trainer
from conftest import REPO

TOP_LEVEL = {"model.py", "train.py", "sample.py", "configurator.py", "config", "data", "scripts", "tests", "docs",
             "README.md", "requirements.txt", ".ci", ".gitignore", "trainer"}


def floors():
    """{module: floor} from the package docstring's numbered lines; model.py is a floor of its own."""
    found = {}
    for number, names in re.findall(r"^\s+(\d)\. ([^:]+):", trainer.__doc__, re.M):
        for name in re.findall(r"\w+(?:\.py)?", names):
            found[name.removesuffix(".py")] = int(number)
    return found


def our_imports(path):
    """The trainer modules (and model) a file imports, lazily or not."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "trainer":  # modules, not the package's RunError
            names |= {a.name for a in node.names if (REPO / "trainer" / f"{a.name}.py").exists()}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trainer."):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "model":
            names.add("model")
    return names


def test_top_level_holds_only_the_chosen_entries():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert {line.split("/")[0] for line in tracked.splitlines()} <= TOP_LEVEL


def import_graph():
    modules = [p for p in (REPO / "trainer").glob("*.py") if p.name != "__init__.py"] + [REPO / "model.py"]
    return {p.stem: our_imports(p) for p in modules}


def test_every_module_has_a_floor_and_imports_nothing_above_it():
    floor, graph = floors(), import_graph()
    assert set(graph) <= set(floor), f"missing from trainer/__init__.py's floors: {sorted(set(graph) - set(floor))}"
    for module, names in graph.items():
        for name in names:
            assert floor[name] <= floor[module], f"{module} imports {name}, on a floor above its own"


def assert_no_cycle(graph):
    done = set()

    def visit(module, path):
        assert module not in path, f"import cycle: {' -> '.join(path + [module])}"
        if module not in done:
            for name in graph.get(module, ()):
                visit(name, path + [module])
            done.add(module)
    for module in graph:
        visit(module, [])


def test_no_import_cycles():
    assert_no_cycle(import_graph())


def script_imports(path, scripts):
    """The other scripts/*.py a script imports, lazily or not (scripts/ is on each script's sys.path)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names & scripts - {path.stem}


def test_scripts_import_one_another_one_way():
    """A tool another tool needs (plan.py's pricing, eval.py's scoring) is imported by it, never back: what both
    need lives in trainer/ (scripts/ladder.py once took plan.py's meta model while plan.py took ladder.py's runs)."""
    paths = list((REPO / "scripts").glob("*.py"))
    scripts = {p.stem for p in paths}
    assert_no_cycle({p.stem: script_imports(p, scripts) for p in paths})


def test_no_module_reaches_into_another_modules_private_names():
    """`checkpoint._one_line` from another file is a helper that belongs in the public interface, or in that file."""
    modules = {p.stem for p in (REPO / "trainer").glob("*.py")} | {"model"}
    reaching = []
    for path in [*(REPO / "trainer").glob("*.py"), REPO / "train.py", REPO / "sample.py", *REPO.glob("scripts/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in modules - {path.stem}):
                reaching.append(f"{path.relative_to(REPO)}: {node.value.id}.{node.attr}")
    assert reaching == []
