"""The package's own code that repro.py runs: the dtype standard and the magnitude formulas.

A reproducer must give the verdict the run gave, so it runs the code the run judged with, not a
copy kept beside it: when a repro folder is written, the source of the modules below is read
from the installed package, cut to what the script needs, and written into the script, which
executes each as a module of its own (templates/repro.py, `package_module`).

- reductions.py, the metrics' pass and the block iteration the budget reads an output with;
- standards/budget.py, whole: the per-element budget (numpy only);
- frameworks/references.py, the exception a reference raises for a call it does not model;
- frameworks/npu_reference.py, npu_fusion_attention's layouts and masks as scaled_dot_product_attention's;
- frameworks/coordinates.py, whole: what rounding a resampling's source coordinates moves its outputs by;
- frameworks/magnitudes.py, its formulas (softmax, layer_norm, group_norm, instance_norm, batch_norm, gelu,
  cross_entropy, attention, multi_head_attention_forward, affine_grid),
  the structural term (`structural`), the list of sums and products, a contraction's float32
  lower bound and a math library's error of unary math (`library_ulps`); not `with_magnitudes`,
  which wires them to the engine;
- standards/dtype.py, its message (`_message`, `CONSTANTS`).

A kept definition brings the module's other top-level definitions it reads (`closure`). A module's
imports of the package are dropped. What the kept code uses of them must be
`provided`: given by the script (a module written before, the status words); anything else is
a ValueError here, at write time, never a NameError in the kernel team's hands. Names used in
annotations only do not count (the modules use `from __future__ import annotations`).
No pytest, no torch.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# What the script provides besides the modules written before: the status words of results.py.
STATUS_WORDS = frozenset({"PASS", "WARNING", "ERROR"})


@dataclass(frozen=True)
class Part:
    """One module of the package, as the script gets it."""

    name: str  # the script's name for it: "budget"
    module: str  # "pytest_msprobe.judging.standards.budget"
    names: frozenset[str] | None = None  # the top-level definitions kept, with those they read; None: all
    uses: tuple[str, ...] = ()  # parts written before whose names it may use


# The metrics' one pass (errors, cosine) and the block iteration the budget reads with.
REDUCTIONS = frozenset({
    "BLOCK", "REL_EPS", "SAFE_SQUARES", "flat", "as_float64", "blocks", "block_starts", "block_at", "finite_pairs",
    "BlockErrors", "Errors", "_INF_BITS", "finite_nonnegative",
    "errors", "_max_relative", "_nonfinite", "cosine", "_scaled_dots",
})  # fmt: skip

# npu_fusion_attention's call as scaled_dot_product_attention's terms, which magnitudes models it by.
FUSED_ATTENTION = frozenset({
    "AttentionInBnsd", "fusion_attention_in_bnsd", "_check_attention_features",
    "_PADDED_LAYOUTS", "_SparseMask", "_padded_in_bnsd", "_kv_head_count", "_to_bnsd", "_from_bnsd",
    "_repeat_kv", "_check_pse",
})  # fmt: skip

PARTS = (
    Part("reductions", "pytest_msprobe.judging.reductions", REDUCTIONS),
    Part("budget", "pytest_msprobe.judging.standards.budget", uses=("reductions",)),
    # The exception the references raise for what they do not model (the registry's, references.py).
    Part("references", "pytest_msprobe.frameworks.references", frozenset({"ReferenceUnsupported"})),
    Part("npu_reference", "pytest_msprobe.frameworks.npu_reference", FUSED_ATTENTION, uses=("references",)),
    Part("coordinates", "pytest_msprobe.frameworks.coordinates"),
    Part(
        "magnitudes",
        "pytest_msprobe.frameworks.magnitudes",
        frozenset(
            {
                "ATTENTION",
                "_fusion_attention",
                "_FLUSHED",
                "_flushed",
                "NORMALISED",
                "normaliser_terms",
                "SUMS_AND_PRODUCTS",
                "PARAMETERS",
                "family",
                "formula",
                "IN_FLOAT32",
                "_formula",
                "_bind",
                "_copy",
                "_softmax",
                "_layer_norm",
                "_group_norm",
                "_instance_norm",
                "NORMS",
                "_batch_norm",
                "_multi_head_attention",
                "_additive",
                "COMPOSITES",
                "_normalised",
                "_gelu",
                "_cross_entropy",
                "_attention",
                "_affine_grid",
                "ROUTES",
                "terms_of",
                "FORMULAS",
                "CONTRACTIONS",
                "U_FLOAT32",
                "terms_bound",
                "lower_bound",
                "UNARY",
                "LIBRARY_ULPS",
                "library_ulps",
                "_base",
                "_probabilities",
                "structural",
                "SAVED_OUTPUT",
                "_UNARY_FNS",
                "STRUCTURAL",
                "_unit",
            }
        ),
        uses=("npu_reference", "coordinates"),
    ),
    Part("dtype", "pytest_msprobe.judging.standards.dtype", frozenset({"CONSTANTS", "_message"}), uses=("budget",)),
)


def sources() -> dict[str, str]:
    """Each part's standalone source, by its name in the script, in the order the script runs them."""
    return {part.name: source(part) for part in PARTS}


@functools.cache
def source(part: Part) -> str:
    path = module_path(part.module)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    package_names: set[str] = set()
    docstring = ""
    imports: list[str] = []
    kept: list[ast.stmt] = []
    for index, statement in enumerate(tree.body):
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            if isinstance(statement, ast.ImportFrom) and statement.level:  # the package's
                package_names.update(alias.asname or alias.name for alias in statement.names)
            else:
                imports.append(segment(lines, statement))
        elif index == 0 and is_docstring(statement):
            docstring = segment(lines, statement)
        else:
            kept.append(statement)
    if part.names is not None:
        kept = closure(kept, part.names)
    missing = (part.names or frozenset()) - {name for s in kept for name in bound_names(s)}
    if missing:
        raise ValueError(f"{path}: no top-level {', '.join(sorted(missing))} to write into repro.py")
    provided = set(STATUS_WORDS)
    for earlier in part.uses:
        provided |= defined_names(source(next(p for p in PARTS if p.name == earlier)))
    unknown = sorted((used_names(kept) & package_names) - provided)
    if unknown:
        raise ValueError(
            f"{path}: the code repro.py runs uses {', '.join(unknown)} from elsewhere in the package, "
            "which a standalone script does not have"
        )
    body = "\n\n".join(segment(lines, statement, comments=True) for statement in kept)
    what = "whole" if part.names is None else ", ".join(bound for s in kept for bound in sorted(bound_names(s)))
    origin = f"# {part.module.replace('.', '/')}.py ({what}), its imports of the package left out\n"
    return origin + docstring + "\n" + "".join(imports) + "\n\n" + body


def closure(statements: list[ast.stmt], names: frozenset[str]) -> list[ast.stmt]:
    """The statements that define `names`, and those defining every module-level name they read, and
    so on, in the module's order: a constant a kept function came to read is written with it, never
    a NameError when the script runs (the script's fallbacks would hide it as a smaller budget)."""
    wanted = set(names)
    while True:
        kept = [statement for statement in statements if bound_names(statement) & wanted]
        more = used_names(kept) & {name for statement in statements for name in bound_names(statement)}
        if more <= wanted:
            return kept
        wanted |= more


def module_path(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"no source for {module}")
    return Path(spec.origin)


def is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def segment(lines: list[str], statement: ast.stmt, comments: bool = False) -> str:
    """The statement's whole lines (decorators and trailing comments included), and with
    `comments` the comment lines right above it."""
    first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))]) - 1
    if comments:
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1
    last = statement.end_lineno or statement.lineno
    return "".join(lines[first:last])


def bound_names(statement: ast.stmt) -> set[str]:
    """The top-level names a statement defines."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    return {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}


def defined_names(text: str) -> set[str]:
    return {name for statement in ast.parse(text).body for name in bound_names(statement)}


def used_names(statements: list[ast.stmt]) -> set[str]:
    """Names the statements read when they run: annotations left out."""
    return {node.id for statement in statements for node in _evaluated(statement) if isinstance(node, ast.Name)}


def _evaluated(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    for field, value in ast.iter_fields(node):
        if field in ("annotation", "returns"):
            continue
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, ast.AST):
                yield from _evaluated(child)
