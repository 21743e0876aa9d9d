"""Structural facts of the code, read from its imports: no import cycle; the pure core (sizing/,
planning/) imports no I/O edge and reads no file; the CLI holds no arithmetic."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent / "ckplan"
EDGES = (
    "ckplan.probe",
    "ckplan.agent",
    "ckplan.filesystem",
    "ckplan.render",
    "ckplan.cli",
    "ckplan.catalog",
    "ckplan.readers",
    "ckplan.profile_store",
    "ckplan.validate",
    "ckplan.savers",
    "ckplan.diagnose",
    "ckplan.report",
    "ckplan.scan",
)
FILE_CALLS = {
    "open",
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "load_toml",
    "read_json",
    "scandir",
    "listdir",
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module(p): ast.parse(p.read_text(), str(p)) for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """Every ckplan module `name` imports, at module level or inside a function (a lazy import is still an edge)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from ckplan import scratch` imports the submodule; `from ckplan import __version__` the package itself
            targets = [f"{node.module}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t.startswith("ckplan") and t != name:
                out.add(t)
    return out


MODULES = _modules()
GRAPH = {name: _imports(name, tree, set(MODULES)) for name, tree in MODULES.items()}


def _cycles() -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def visit(n: str) -> None:
        state[n] = "open"
        stack.append(n)
        for m in sorted(GRAPH.get(n, ())):
            if state.get(m) == "open":
                cycles.append(stack[stack.index(m) :] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = "done"

    for n in sorted(GRAPH):
        if n not in state:
            visit(n)
    return cycles


def test_the_graph_is_read():
    """The checks below would pass on an empty graph: pin a few known edges first."""
    assert "ckplan.planning.scenario" in GRAPH["ckplan.planning.recommend"]
    assert "ckplan.planning.savetime" in GRAPH["ckplan.planning.scenario"]
    assert len(MODULES) > 50


def test_the_bare_package_is_seen_as_a_module():
    """An import of a name from the package itself is an edge to `ckplan`, whose `__init__` reaches the API."""
    tree = ast.parse("from ckplan import __version__, scratch\nfrom ckplan.version import __version__")
    assert _imports("ckplan.x", tree, set(MODULES)) == {"ckplan", "ckplan.scratch", "ckplan.version"}
    assert "ckplan.api" in GRAPH["ckplan"]


def test_no_module_imports_the_package_above_it():
    importers = sorted(name for name, edges in GRAPH.items() if "ckplan" in edges)
    assert not importers, f"{importers} import from the package `ckplan`, which reaches the API: a circle"


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def _floor(module: str) -> str:
    """The package or top-level module a module belongs to: `ckplan.sizing.plan` → `ckplan.sizing`."""
    return ".".join(module.split(".")[:2])


FLOORS = {
    a: {_floor(m) for m in edges} - {a}
    for a in {_floor(n) for n in GRAPH}
    for edges in [set().union(*(e for n, e in GRAPH.items() if _floor(n) == a))]
}


def package_circles(floors: dict[str, set[str]]) -> list[str]:
    """The packages that import themselves round about: each is on a circle of packages."""

    def below(a: str) -> set[str]:
        found, todo = set(), list(floors.get(a, ()))
        while todo:
            b = todo.pop()
            if b not in found:
                found.add(b)
                todo.extend(floors.get(b, ()))
        return found

    return sorted(a for a in floors if a in below(a))


def test_the_package_floors_are_read():
    """The check below would pass on a graph of no packages, or a finder that finds nothing: pin both."""
    assert "ckplan.frameworks" in FLOORS["ckplan.sizing"] and "ckplan.model" in FLOORS["ckplan.frameworks"]
    sample = {"ckplan.a": {"ckplan.b"}, "ckplan.b": {"ckplan.c"}, "ckplan.c": {"ckplan.a"}, "ckplan.d": {"ckplan.a"}}
    assert package_circles(sample) == ["ckplan.a", "ckplan.b", "ckplan.c"]


def test_no_package_climbs_into_a_package_that_imports_it():
    """Packages stand in floors: where ckplan.x imports ckplan.y, nothing of ckplan.y imports ckplan.x, directly or
    round about (a circle of packages is a climb from a lower floor to a higher one)."""
    circles = package_circles(FLOORS)
    assert not circles, f"packages on a circle of imports: {circles}"


@pytest.mark.parametrize(
    ("floor", "allowed"),
    [
        ("ckplan.frameworks", {"ckplan.model", "ckplan.units", "ckplan.errors", "ckplan.schema"}),
        ("ckplan.model", {"ckplan.units", "ckplan.errors", "ckplan.schema"}),
    ],
)
def test_the_bottom_floors_import_only_what_is_below_them(floor, allowed):
    """What ckplan knows of frameworks imports only what describes a model, units, errors and the schema; what
    describes a model, less."""
    assert FLOORS[floor] <= allowed, f"{floor} imports {sorted(FLOORS[floor] - allowed)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(("ckplan.sizing", "ckplan.planning"))))
def test_core_imports_no_edge_and_reads_no_file(name):
    edges = sorted(m for m in GRAPH[name] if m.startswith(EDGES))
    assert not edges, f"{name} imports {edges}"
    calls = {
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(MODULES[name])
        if isinstance(n, ast.Call)
    }
    assert not calls & FILE_CALLS, f"{name} calls {sorted(calls & FILE_CALLS)}"


CLI_MODULES = sorted(m for m in MODULES if m == "ckplan.cli.app" or m.startswith("ckplan.cli.commands."))


@pytest.mark.parametrize("name", CLI_MODULES)
def test_cli_holds_no_arithmetic(name):
    """The CLI's modules parse, call the library and render: no arithmetic operator on numbers."""
    tree = MODULES[name]
    ops = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow))
    ]
    # string concatenation and path joins are not arithmetic: keep only operations with a numeric literal or a call
    numeric = [
        n
        for n in ops
        if not any(
            isinstance(side, ast.Constant) and isinstance(side.value, str) or isinstance(side, ast.JoinedStr)
            for side in (n.left, n.right)
        )
    ]
    assert not numeric, f"arithmetic in {name} at lines " + ", ".join(str(n.lineno) for n in numeric)


def test_command_table_names_every_command():
    """app.COMMANDS, which `ckplan` resolves commands through, lists each command of ckplan/cli/commands/ once, in the
    module that defines it: a command added to a module but not to the table would never run."""
    import importlib

    from typer.main import get_command_name

    from ckplan.cli.app import COMMANDS

    defined = {}
    for module in sorted({*COMMANDS.values(), *(m.rpartition(".")[2] for m in CLI_MODULES if ".commands." in m)}):
        for info in importlib.import_module(f"ckplan.cli.commands.{module}").commands.registered_commands:
            defined[info.name or get_command_name(info.callback.__name__)] = module
    assert defined == COMMANDS


def test_size_builds_only_its_own_command():
    """`ckplan size` imports its command's module and no other, and not the probe, planning (but its named defaults)
    or validation code (the lazy command table is what keeps its start-up near typer's own; scripts/bench_size.py measures it)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.argv = ['ckplan', 'size', '--params', '7e9', '--json']\n"
        "from ckplan.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(m for m in sys.modules if m.startswith('ckplan.')), file=sys.stderr)"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr.split()
    )
    assert "ckplan.cli.commands.size" in loaded and "ckplan.sizing.plan" in loaded
    others = sorted(m for m in loaded if m.startswith("ckplan.cli.commands.") and m != "ckplan.cli.commands.size")
    assert not others
    heavy = sorted(
        m for m in loaded if m.startswith(("ckplan.probe", "ckplan.planning.", "ckplan.validate", "ckplan.savers"))
    )
    # the named defaults (plain values, no imports) give `size --max-overhead` its shown default
    assert heavy == ["ckplan.planning.defaults"]


def test_scripts_import_nothing_from_tests():
    """The benchmarks share the test hosts and the S3 endpoint through scripts/_harness.py, not by reaching into tests/."""
    offenders = []
    for path in sorted((ROOT.parent / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert not offenders


# Framework knowledge: a framework's module (ckplan/frameworks/<name>.py: its layout, log extractor and record) and
# the registry that joins them (ckplan/frameworks/__init__.py). Everywhere else asks the record.
FRAMEWORK_MODULES = ("ckplan.frameworks",)


def _names_framework(node: ast.AST) -> bool:
    """An expression that reads a framework's name: `framework`, `plan.setup.framework`, `s.framework`, …"""
    return any(
        isinstance(n, ast.Name)
        and "framework" in n.id.lower()
        or isinstance(n, ast.Attribute)
        and "framework" in n.attr.lower()
        for n in ast.walk(node)
    )


def _literal_names(node: ast.AST, names: set[str]) -> set[str]:
    """The framework names a literal spells: a string, or a tuple, list or set of strings."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in names}


def framework_name_checks(tree: ast.AST, names: set[str]) -> list[str]:
    """Each place that tells frameworks apart by a literal name: `framework == "hf"`, `framework in ("dcp", …)`, a
    `match framework` case, or a table keyed by two or more framework names (`{"deepspeed": …, "hf": …}`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            spelt = set().union(*(_literal_names(o, names) for o in operands))
            if spelt and any(_names_framework(o) for o in operands):
                found.append(f"line {node.lineno}: compares a framework with {sorted(spelt)}")
        elif isinstance(node, ast.Match) and _names_framework(node.subject):
            found += [
                f"line {c.pattern.lineno}: matches a framework name"
                for c in node.cases
                if any(isinstance(p, ast.MatchValue) and _literal_names(p.value, names) for p in ast.walk(c.pattern))
            ]
        elif isinstance(node, ast.Dict):
            keyed = {
                k.value
                for k in node.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value in names
            }
            if len(keyed) >= 2:
                found.append(f"line {node.lineno}: a table keyed by framework names {sorted(keyed)}")
    return found


def _framework_names() -> set[str]:
    from ckplan.frameworks import FRAMEWORKS

    return set(FRAMEWORKS)


def test_the_framework_name_scan_finds_what_it_looks_for():
    """The test below would pass on a scan that finds nothing: each form it refuses, found in a sample."""
    names = _framework_names()
    sample = ast.parse("""
if plan.setup.framework == "hf": pass
use_dcp = framework in ("dcp", "megatron")
zero = s.framework in {"deepspeed"} or "lightning" != s.framework
SAVERS = {"deepspeed": "torch.save", "hf": "safetensors"}
match framework:
    case "dlio": pass
fine = saver == "dcp" or kind in ("weights", "optimizer") or framework == name
""")
    found = framework_name_checks(sample, names)
    assert sorted(f.split(":")[0] for f in found) == ["line 2", "line 3", "line 4", "line 4", "line 5", "line 7"], found


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not n.startswith(FRAMEWORK_MODULES)))
def test_no_framework_is_told_apart_by_name_outside_its_modules(name):
    """What a framework does is asked of its record (`framework_of(name).saver`), not decided by its name."""
    found = framework_name_checks(MODULES[name], _framework_names())
    assert not found, f"{name}: " + "; ".join(found)


def test_every_framework_has_a_layout_a_saver_and_an_extractor():
    import importlib
    from typing import get_args

    from ckplan import record
    from ckplan.frameworks import FRAMEWORKS, LOG_EXTRACTORS, framework_of
    from ckplan.frameworks.framework import Framework, SaverKind
    from ckplan.frameworks.logs import Extractor

    modules = sorted(p.stem for p in (ROOT / "frameworks").glob("*.py"))
    framework_modules = [
        m
        for m in modules
        if isinstance(getattr(importlib.import_module(f"ckplan.frameworks.{m}"), "FRAMEWORK", None), Framework)
    ]
    assert sorted(FRAMEWORKS) == framework_modules, "a framework module without a registry line, or the reverse"
    for name, fw in FRAMEWORKS.items():
        assert fw.name == name and importlib.import_module(f"ckplan.frameworks.{name}").FRAMEWORK is fw
        assert all(adapter in record.ADAPTERS for adapter in fw.recorders), name
        assert fw.saver.kind in get_args(SaverKind) and fw.saver.how
        if fw.extractors:
            assert all(issubclass(cls, Extractor) and cls is not Extractor for cls in fw.extractors), name
            assert fw.no_extractor is None
        else:
            assert fw.no_extractor, f"{name} has no log extractor and says not why"
        assert fw.layout.shows_zero_stage in ("always", "nonzero", "never")
        assert framework_of(name) is fw
    # the registry's order: size --from asks HF Trainer before DeepSpeed and DCP, whose files its saves hold, and
    # Megatron before DCP; Accelerate before HF Trainer, whose model.safetensors both write; DLIO first, whose saves
    # are refused; diagnose feeds the extractors in the same order
    assert list(FRAMEWORKS) == ["dlio", "accelerate", "hf", "megatron", "deepspeed", "dcp", "lightning"]
    assert [cls.name for cls in LOG_EXTRACTORS] == [
        "accelerate",
        "hf",
        "megatron",
        "deepspeed",
        "torchtitan",
        "lightning",
    ]
    assert {fw.saver.kind for fw in FRAMEWORKS.values()} == set(get_args(SaverKind)), "a saver kind no framework uses"


def test_the_registry_imports_nothing_heavy():
    """The CLI starts in a fraction of a second: the registry pulls in neither torch nor rich nor the renderers."""
    import subprocess
    import sys

    code = (
        "import sys, ckplan.frameworks; print(' '.join(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'torch', 'rich', 'safetensors', 'matplotlib', 'boto3', 'numpy', 'typer'})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    edges = ("ckplan.validate", "ckplan.savers", "ckplan.render", "ckplan.cli", "ckplan.probe")
    assert not [m for m in GRAPH["ckplan.frameworks"] if m.startswith(edges)]


def test_probe_imports_nothing_from_validate():
    """The probe's replay and calibration run the savers (ckplan.savers), below both the probe and validate:
    validate compares measured saves with the prediction, and nothing below it reaches up into it."""
    up = {m: sorted(d for d in deps if d.startswith("ckplan.validate")) for m, deps in GRAPH.items()}
    assert not {m: d for m, d in up.items() if d and m.startswith(("ckplan.probe", "ckplan.savers"))}


def test_savers_import_nothing_from_the_probe():
    """The savers sit below the probe (its replay runs them) and validate: neither reaches down into the other."""
    up = {m: sorted(d for d in deps if d.startswith("ckplan.probe")) for m, deps in GRAPH.items()}
    assert not {m: d for m, d in up.items() if d and m.startswith(("ckplan.savers", "ckplan.validate"))}


def test_the_probe_engine_names_no_backend():
    """What one backend alone takes or does is its module's (its Options, its Session's figures): the engine
    imports no backend and compares nothing with a backend's kind (`fs_type == "s3"`)."""
    from ckplan.probe.backends import BACKENDS

    assert not [m for m in GRAPH["ckplan.probe.engine"] if m.startswith("ckplan.probe.backends")]
    assert not backend_kind_checks(MODULES["ckplan.probe.engine"], set(BACKENDS))


def backend_kind_checks(tree: ast.AST, kinds: set[str]) -> list[int]:
    """The lines that compare a value with a backend's kind, spelt as a literal."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(o, ast.Constant) and o.value in kinds for o in [node.left, *node.comparators])
    ]


def test_the_backend_kind_scan_finds_what_it_looks_for():
    sample = ast.parse('direct = None if facts.fs_type == "s3" else True\nfine = kind == "buffered"')
    assert backend_kind_checks(sample, {"s3", "hosts", "filesystem"}) == [1]


MAX_FUNCTION_LINES = 80


def _long_functions(source: str) -> list[tuple[str, int]]:
    tree = ast.parse(source)
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_the_function_length_scan_finds_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"def long():\n{body}") == [("long", MAX_FUNCTION_LINES + 1)]
    assert _long_functions(f"def short():\n{body[: body.rindex('    x')]}") == []


def test_no_function_in_the_package_is_over_80_lines():
    found = {
        f"{path.relative_to(ROOT.parent)}: {name}": lines
        for path in sorted(ROOT.rglob("*.py"))
        for name, lines in _long_functions(path.read_text())
    }
    assert found == {}


def test_the_option_groups_are_built_without_eval_or_a_list_of_flags():
    """cli/options.py builds its groups from the models' Flags: short, no eval, and no flag named in it but the
    two every command shares (--json, --plan) and those it refuses together (--quick, --thorough)."""
    source = (ROOT / "cli" / "options.py").read_text()
    assert len(source.splitlines()) < 200
    calls = {n.func.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"eval", "exec"}
    assert set(re.findall(r'"(--[a-z-]+)"', source)) <= {"--json", "--plan", "--quick", "--thorough"}
