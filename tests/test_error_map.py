"""One error map: every coded error is made with its code, codes have one spelling, and one
function turns an exception into what a model sees.

Three AST rules over ``codemode/**/*.py``:

* every call of a coded error type (`ToolError` and its subclasses, found in the sources)
  passes a code: ``code=``, or positionally where its constructor takes it; a subclass whose
  constructor takes none stands for one code and must pass it to its base itself;
* no dict literal spells a code under an ``"error"`` key (``{"error": "bad_cwd"}``,
  ``{"error": ErrorCode.X.value}``, ``{"error": code.value}``): the code is the ``code`` field;
* outside `codemode.tools.failure_of` (and the CLI, whose one mapping prints the message and
  chooses the exit status), no handler of a caught `ToolError` reads its ``code`` to build a
  result of its own.

Each rule is also run on planted snippets, so a rule that stopped finding anything fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import codemode
from codemode.errors import ErrorCode

PACKAGE = Path(codemode.__file__).parent
ROOT = "ToolError"
# The modules allowed to take a caught ToolError apart: the one map, and the CLI's one mapping.
MAPS = {"tools/_model.py", "cli.py"}

Signatures = dict[str, tuple[list[str], bool]]  # class -> (positional parameters, takes code)


def _sources() -> dict[str, ast.Module]:
    return {
        str(p.relative_to(PACKAGE)): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))
    }


def _init(node: ast.ClassDef) -> ast.FunctionDef | None:
    return next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)


def _base_names(node: ast.ClassDef) -> list[str]:
    return [
        b.id if isinstance(b, ast.Name) else b.attr
        for b in node.bases
        if isinstance(b, ast.Name | ast.Attribute)
    ]


def coded_types(trees: list[ast.Module]) -> Signatures:
    """Every class deriving from `ToolError` in ``trees``, with its constructor's positional
    parameters (``self`` left out) and whether it takes a ``code``."""
    classes = {n.name: n for t in trees for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    found: Signatures = {}
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in found:
                continue
            bases = [b for b in _base_names(node) if b in found]
            if name != ROOT and not bases:
                continue
            init = _init(node)
            if init is None:
                found[name] = found[bases[0]]
            else:
                positional = [a.arg for a in [*init.args.posonlyargs, *init.args.args][1:]]
                takes = "code" in positional or any(a.arg == "code" for a in init.args.kwonlyargs)
                found[name] = (positional, takes)
            changed = True
    return found


def _line(found: str) -> int:
    return int(found.split(":")[0].removeprefix("line "))


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _gives_code(call: ast.Call, positional: list[str]) -> bool:
    if any(k.arg == "code" for k in call.keywords):
        return True
    if "code" not in positional or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    return len(call.args) > positional.index("code")


def uncoded_calls(tree: ast.Module, types: Signatures) -> list[str]:
    """Calls of a coded type that give no code, and ``super().__init__`` calls of a class that
    stands for one code that do not pass it on."""
    missing: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in types:
            positional, takes = types[_callee(node) or ""]
            if takes and not _gives_code(node, positional):
                missing.append(f"line {node.lineno}: {ast.unparse(node)[:100]}")
        if isinstance(node, ast.ClassDef) and node.name in types and not types[node.name][1]:
            base = next(b for b in _base_names(node) if b in types)
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "__init__"
                    and isinstance(call.func.value, ast.Call)
                    and _callee(call.func.value) == "super"
                    and not _gives_code(call, types[base][0])
                ):
                    missing.append(f"line {call.lineno}: {node.name} passes no code to {base}")
    return sorted(missing, key=_line)


_CODES = {code.value for code in ErrorCode}


def _names_a_code(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return value.value in _CODES
    if isinstance(value, ast.Attribute) and value.attr == "value":  # code.value, ErrorCode.X.value
        return True
    return any(isinstance(n, ast.Name) and n.id == "ErrorCode" for n in ast.walk(value))


def codes_as_error_keys(tree: ast.Module) -> list[str]:
    """Dict literals that spell a code under an ``"error"`` key."""
    found = [
        f"line {node.lineno}: {ast.unparse(node)[:100]}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and key.value == "error" and _names_a_code(value)
    ]
    return sorted(found, key=_line)


def own_converters(tree: ast.Module) -> list[str]:
    """Handlers of a caught `ToolError` that read its ``code`` (a converter of their own)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler) or node.name is None or node.type is None:
            continue
        caught = [n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)]
        if ROOT not in caught:
            continue
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Attribute)
                and isinstance(inner.value, ast.Name)
                and inner.value.id == node.name
                and inner.attr == "code"
            ):
                found.append(f"line {inner.lineno}: {ast.unparse(inner)}")
    return found


# -- the package ----------------------------------------------------------------------------------


def test_every_coded_error_is_made_with_its_code() -> None:
    sources = _sources()
    types = coded_types(list(sources.values()))
    # The scan found the types it has to check (a rename would otherwise empty it).
    assert {"ToolError", "UnknownRefError", "SandboxDenied", "ProcessNotFound", "UnsafePath"} <= set(types)
    missing = {path: found for path, tree in sources.items() if (found := uncoded_calls(tree, types))}
    assert not missing, missing


def test_no_module_spells_a_code_as_an_error_key() -> None:
    spelled = {path: found for path, tree in _sources().items() if (found := codes_as_error_keys(tree))}
    assert not spelled, spelled


def test_one_function_turns_a_tool_error_into_a_result() -> None:
    converters = {
        path: found
        for path, tree in _sources().items()
        if path not in MAPS and (found := own_converters(tree))
    }
    assert not converters, converters


# -- the rules find what they are for ----------------------------------------------------------------

_PLANTED = """
class ToolError(Exception):
    def __init__(self, message, data=None, *, code): ...

class Fixed(ToolError):
    def __init__(self, message):
        super().__init__(message)

class Passes(ToolError):
    def __init__(self, message):
        super().__init__(message, code=ErrorCode.NO_MATCH)

class ByPosition(ToolError):
    def __init__(self, message, path, code): ...

def f(code):
    raise ToolError("no code")
    raise ToolError("a code", code=ErrorCode.NO_MATCH)
    raise errors.ToolError("no code either", {"path": "p"})
    raise ByPosition("m", "p")
    raise ByPosition("m", "p", ErrorCode.NOT_FOUND)
    raise Fixed("m")
    raise ToolError("spelled", {"error": "bad_cwd"}, code=ErrorCode.BAD_CWD)
    data = {"error": ErrorCode.BAD_CWD.value}
    other = {"error": code.value}
    message = {"ok": False, "error": "the supervisor said why"}
    try:
        pass
    except ToolError as exc:
        return ToolResult.failure(exc.code, exc.message, exc.data)
    except ValueError as exc:
        return exc.code
"""


def test_the_rules_find_planted_faults() -> None:
    tree = ast.parse(_PLANTED)
    types = coded_types([tree])
    assert types["ByPosition"] == (["message", "path", "code"], True) and not types["Fixed"][1]
    missing = uncoded_calls(tree, types)
    assert [line.split(":")[0] for line in missing] == ["line 7", "line 17", "line 19", "line 20"], missing
    spelled = codes_as_error_keys(tree)
    assert [line.split(":")[0] for line in spelled] == ["line 23", "line 24", "line 25"], spelled
    converters = own_converters(tree)
    assert [line.split(": ")[1] for line in converters] == ["exc.code"], converters
