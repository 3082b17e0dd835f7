"""forge_gpu's public surface: one module per domain (forge_gpu/sim.py, recording.py, formats.py, reading.py,
curation.py, export.py, testing.py), each name in exactly one, resolving from the module its table names, which
defines it or re-exports it (so a wrong path there fails here, not in a user's first call); ``forge_gpu`` itself
holds the domains alone, and ``forge_gpu.NAME`` is an AttributeError naming the domain that holds NAME."""

import ast
import importlib
import importlib.util
import subprocess
import sys

import pytest

import forge_gpu

DOMAINS = {d: importlib.import_module(f"forge_gpu.{d}") for d in forge_gpu.DOMAINS}
EXPORTS = sorted((domain, name, home) for domain, m in DOMAINS.items() for name, home in m.NAMES.items())


def bound_at_top_level(tree: ast.Module) -> set[str]:
    """Names a module binds in its body: def, class, assignment, import (a re-export), under if/try too."""
    names = set()
    for node in tree.body:
        for inner in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(inner.name)
            elif isinstance(inner, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(inner, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split(".")[0] for a in inner.names}
    return names


def test_all_is_the_domains_and_each_domains_all_its_table():
    assert forge_gpu.__all__ == list(forge_gpu.DOMAINS)
    for m in DOMAINS.values():
        assert m.__all__ == sorted(m.NAMES) and dir(m) == m.__all__
    assert dir(forge_gpu) == sorted(forge_gpu.DOMAINS)


def test_each_name_is_in_one_domain_and_no_alias_is_left():
    """No name is exposed by two domains, and no two names are one object (an alias such as the old
    EpisodeRecorder = NpzRecorder)."""
    names = [name for _, name, _ in EXPORTS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    objects = {}
    for domain, name, _ in EXPORTS:
        value = getattr(DOMAINS[domain], name)
        if isinstance(value, type) or callable(value):
            assert id(value) not in objects, f"{name} is {objects[id(value)]}"
            objects[id(value)] = name


def export_problem(name: str, module: str, domain: str = "reading") -> str | None:
    """What is wrong with ``NAMES[name] = module`` in the domain's table: no such module, or one that neither
    defines nor imports the name in its own source, or one whose object is not the domain's and forge_gpu's; None
    where nothing is."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.origin:
        return f"{domain}.NAMES[{name!r}]: no module {module}"
    with open(spec.origin) as f:
        tree = ast.parse(f.read(), filename=spec.origin)
    if name not in bound_at_top_level(tree):
        return f"{domain}.NAMES[{name!r}]: {module} neither defines nor imports {name}"
    value = getattr(importlib.import_module(module), name)
    if value is not getattr(DOMAINS[domain], name):
        return f"forge_gpu.{domain}.{name} is not {module}.{name}"
    return None


@pytest.mark.parametrize("domain, name, module", EXPORTS, ids=[f"{d}.{n}" for d, n, _ in EXPORTS])
def test_each_public_name_is_in_the_module_named_for_it(domain, name, module):
    """The module exists, binds the name in its own source (a definition or an import that re-exports it),
    and forge_gpu.<domain>.<name> is that module's object, kept once loaded; forge_gpu.<name> is not there."""
    assert export_problem(name, module, domain) is None  # which loaded it through the modules' __getattr__
    value = getattr(importlib.import_module(module), name)
    assert vars(DOMAINS[domain]).get(name) is value  # and kept it
    with pytest.raises(AttributeError, match=rf"no attribute '{name}'; it is forge_gpu\.{domain}\.{name}$"):
        getattr(forge_gpu, name)
    assert name not in vars(forge_gpu)


def test_every_name_of_all_resolves():
    missing = [f"{d}.{n}" for d, m in DOMAINS.items() for n in m.__all__ if getattr(m, n, None) is None]
    assert not missing


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="^module 'forge_gpu' has no attribute 'not_a_name'$"):
        forge_gpu.not_a_name  # noqa: B018
    with pytest.raises(AttributeError, match="module 'forge_gpu.reading' has no attribute 'make'"):
        DOMAINS["reading"].make  # noqa: B018


@pytest.mark.parametrize(
    "name, module, expected",
    [
        ("read_episodes", "forge_gpu._src.core.episode", "neither defines nor imports"),  # moved, path stale
        ("read_episodes", "forge_gpu._src.reading.gone", "no module"),
        ("read_episodes", "forge_gpu._src.gone.runs", "no module"),
    ],
)
def test_the_check_reports_a_wrong_path(name, module, expected):
    assert expected in export_problem(name, module)


def test_bound_at_top_level_sees_definitions_and_re_exports():
    tree = ast.parse("from a import b as c\nimport d.e\nx: int = 1\nif True:\n    def f(): pass\nclass K: pass\n")
    assert bound_at_top_level(tree) == {"c", "d", "x", "f", "K"}


def test_importing_forge_gpu_loads_none_of_its_modules():
    """Names load on first use: ``import forge_gpu`` and its domain modules import no module of forge_gpu._src,
    Warp or torch."""
    code = (
        "import sys, forge_gpu, forge_gpu.sim, forge_gpu.recording, forge_gpu.formats, forge_gpu.reading, "
        "forge_gpu.curation, forge_gpu.export, forge_gpu.testing; "
        "print(sorted(m for m in sys.modules if m.startswith('forge_gpu._src') or m in ('warp', 'newton', 'torch')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_sim_terms_is_the_module_users_write_terms_with():
    """forge_gpu.sim.terms: the Frame the library's terms read, the decorator that declares a term's named
    parameters, the reader of those parameters and the library's index."""
    terms = forge_gpu.sim.terms
    from forge_gpu.kernels.terms import Frame

    assert terms.Frame is Frame and callable(terms.term) and "Frame" in terms.__all__
    library = terms.library()
    assert set(library) == {"observations", "rewards", "conditions"} and "root_height" in library["observations"]
    with pytest.raises(ValueError, match=r"term\(params=...\): std = 'wide': expected float, int, bool"):
        terms.term(params={"std": "wide"})
