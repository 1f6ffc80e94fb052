"""Shell scripts as the simple commands they run, through tree-sitter-bash.

`parse` turns a script into every simple command it holds, wherever it sits: pipelines, lists,
subshells, groups, ``if``/``case``/``for``/``while`` bodies, function bodies, command and process
substitutions (also inside strings, ``${x:-$(…)}`` and unquoted here-docs). Each command's words
are given as their static value (quotes and escapes removed, so ``r''m``, ``\\rm``, ``"rm"`` and
``$'\\x72m'`` are all ``rm``), or None where the shell computes the word when it runs
(``$cmd``, ``$(…)``, globs, ``~``). What cannot be read (a syntax error, a computed command name)
is a `Problem` naming the construct.

tree-sitter-bash was chosen over bashlex: it parses every construct above (bashlex 0.18 raises on
``case``, ``[[ ]]``, arrays, ``$((…))``, ``select``, ``time``, ``coproc`` and quoted here-doc
delimiters, and misses ``$(…)`` inside here-docs and ``${x:-…}``), and it is 4x-28x faster
(bench/bench_policy.py).
"""

from __future__ import annotations

import codecs
import re
import threading
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_bash

from codemode.policy._evaluated import refused_builtin

__all__ = ["Command", "Parsed", "Problem", "parse"]

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_local = threading.local()

# Nodes whose value is computed when the shell runs.
_COMPUTED = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
        "brace_expression",
    }
)
_GLOB = re.compile(r"(?<!\\)[*?\[]")
_CONTINUATION = re.compile(r"(?<!\\)((?:\\\\)*)\\\n")
"""A backslash-newline (not itself escaped): bash joins the lines before it reads words."""
# Arithmetic: bash evaluates a variable's text as an expression there, and an array subscript in
# that text runs command substitutions (`x='a[$(cmd)]'; echo $((x))`). Only numbers (and the
# special parameters that are always numbers) are provably literal.
_ARITHMETIC_LITERAL = re.compile(r"\$[#?$!]|\b(?:0[xX][0-9a-fA-F]+|\d+#[0-9A-Za-z@_]+|\d+)\b")
_ARITHMETIC_NAME = re.compile(r"[A-Za-z_$`]")
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_SUBSTRING = re.compile(r"^\$\{[#!]?[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?:(?![-=+?])(.*)\}$", re.DOTALL)
_NAME_LIST = re.compile(r"^\$\{!(?:[A-Za-z_][A-Za-z0-9_]*(?:[*@]|\[[*@]\]))\}$")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_DQ_ESCAPE = re.compile(r'\\([$`"\\\n])')


@dataclass(frozen=True)
class Problem:
    """A part of a script that cannot be checked.

    Attributes:
        construct: What it is, in words ("a syntax error", "a computed command name").
        text: The source text (cut to 60 characters).
        line: Its line (1-based).
    """

    construct: str
    text: str
    line: int

    def describe(self) -> str:
        """One phrase: the construct, its text and line."""
        return f"{self.construct} `{self.text}` (line {self.line})"


@dataclass(frozen=True)
class Command:
    """One simple command of a script.

    Attributes:
        words: The command name and arguments, each its static value or None when computed.
        raw: The words' source text.
        line: Its line (1-based).
        stdin_script: The text a here-doc or here-string feeds to its stdin, if any.
        piped_in: Its stdin comes from the previous command of a pipeline.
        piped_from: That previous command, when it is a simple command.
        stdin_file: The static path a ``<`` redirect feeds to its stdin.
        stdin_unknown: What feeds its stdin when that text is computed when the shell runs (a
            here-doc with expansions, a computed ``<`` path or here-string), in words.
    """

    words: tuple[str | None, ...]
    raw: tuple[str, ...]
    line: int
    stdin_script: str | None = None
    piped_in: bool = False
    piped_from: Command | None = None
    stdin_file: str | None = None
    stdin_unknown: str | None = None


@dataclass
class Parsed:
    """A script's simple commands (in source order), what could not be read, the files its
    redirections write (None: a computed path) and the variables it assigns (``NAME=value``
    anywhere, also after ``export``), with their line."""

    commands: list[Command] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    written: list[str | None] = field(default_factory=list)
    assigned: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class _Stdin:
    """What a command's redirections feed to its stdin (see `Command`)."""

    script: str | None = None
    file: str | None = None
    unknown: str | None = None


def _parser() -> tree_sitter.Parser:
    parser: tree_sitter.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = tree_sitter.Parser(_LANGUAGE)
    return parser


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:59] + "…"


def static_value(node: tree_sitter.Node) -> str | None:
    """The value the shell gives a word node, or None when it is computed at run time."""
    kind = node.type
    if kind in _COMPUTED:
        return None
    if kind in ("word", "number"):
        text = _text(node)
        if _GLOB.search(text) or text.startswith("~"):
            return None
        return _ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "ansi_c_string":
        try:
            return codecs.decode(_text(node)[2:-1], "unicode_escape")
        except UnicodeDecodeError:
            return None
    if kind in ("string", "translated_string"):
        parts: list[str] = []
        for child in node.named_children:
            if child.type == "string_content":
                parts.append(_DQ_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), _text(child)))
            elif child.type == "string":  # $"..." holds a string
                value = static_value(child)
                if value is None:
                    return None
                parts.append(value)
            else:
                return None
        return "".join(parts)
    if kind == "concatenation":
        values = [static_value(child) for child in node.children]
        if any(v is None for v in values):
            return None
        return "".join(v for v in values if v is not None)
    if kind == "command_name":
        return static_value(node.children[0]) if node.children else None
    return None


_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_HEREDOC_ESCAPE = re.compile(r"\\([$`\\\n])")


def parse(script: str) -> Parsed:
    """The simple commands of ``script`` and the problems met reading it."""
    script = _CONTINUATION.sub(lambda m: m.group(1), script)
    tree = _parser().parse(script.encode("utf-8", "surrogateescape"))
    parsed = Parsed()
    _walk(tree.root_node, parsed, piped_in=False, piped_from=None, stdin=_Stdin())
    if tree.root_node.has_error and not parsed.problems:
        parsed.problems.append(Problem("a syntax error", _short(script), 1))
    return parsed


def _heredoc(redirect: tree_sitter.Node) -> _Stdin:
    """The text a here-doc feeds: verbatim when its delimiter is quoted; else with the shell's
    backslash escapes applied, or unknown when it holds expansions."""
    body = next((c for c in redirect.named_children if c.type == "heredoc_body"), None)
    if body is None:
        return _Stdin(script="")
    start = next((c for c in redirect.named_children if c.type == "heredoc_start"), None)
    quoted = start is not None and any(q in _text(start) for q in "'\"\\")
    if quoted:
        return _Stdin(script=_text(body))
    if any(c.type != "heredoc_content" for c in body.named_children):
        return _Stdin(unknown="a here-doc with expansions")
    return _Stdin(script=_HEREDOC_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), _text(body)))


def _redirects(redirects: list[tree_sitter.Node], parsed: Parsed, stdin: _Stdin) -> _Stdin:
    """What ``redirects`` feed to stdin (the last one wins); the files they write go to ``parsed``."""
    for redirect in redirects:
        if redirect.type == "heredoc_redirect":
            stdin = _heredoc(redirect)
        elif redirect.type == "herestring_redirect":
            word = redirect.named_children[-1] if redirect.named_children else None
            value = static_value(word) if word is not None else None
            stdin = _Stdin(script=value) if value is not None else _Stdin(unknown="a computed here-string")
        elif redirect.type == "file_redirect":
            operator = next((c.type for c in redirect.children if not c.is_named), "")
            target = redirect.child_by_field_name("destination")
            descriptor = next((c for c in redirect.named_children if c.type == "file_descriptor"), None)
            value = static_value(target) if target is not None else None
            if operator in _WRITES:
                parsed.written.append(value)
            if operator in ("<", "<>") and (descriptor is None or _text(descriptor) == "0"):
                stdin = _Stdin(file=value) if value is not None else _Stdin(unknown="a computed input file")
    return stdin


def _walk(
    node: tree_sitter.Node, parsed: Parsed, *, piped_in: bool, piped_from: Command | None, stdin: _Stdin
) -> None:
    kind = node.type
    if node.is_error or node.is_missing:
        what = f"a missing `{node.type}`" if node.is_missing else "a syntax error"
        parsed.problems.append(Problem(what, _short(_text(node)) or node.type, node.start_point[0] + 1))
        return
    if kind == "variable_assignment" and node.named_children:
        name_node = node.named_children[0]
        name_node = name_node.child_by_field_name("name") or name_node
        parsed.assigned.append((_text(name_node), node.start_point[0] + 1))
    if kind == "for_statement":
        variable = node.child_by_field_name("variable")
        if variable is not None:
            parsed.assigned.append((_text(variable), node.start_point[0] + 1))
    evaluated = _evaluated_text(node)
    if kind in ("declaration_command", "unset_command") and node.children:
        parts = node.named_children
        words = (_text(node.children[0]), *(_declared(c) for c in parts))
        evaluated = evaluated or refused_builtin(words, (_text(node.children[0]), *(_text(c) for c in parts)))
    if evaluated is not None:
        parsed.problems.append(Problem(evaluated, _short(_text(node)), node.start_point[0] + 1))
    if kind == "command":
        _command(node, parsed, piped_in=piped_in, piped_from=piped_from, stdin=stdin)
        return
    if kind == "pipeline":
        previous = piped_from
        for index, child in enumerate(node.named_children):
            before = len(parsed.commands)
            _walk(child, parsed, piped_in=index > 0 or piped_in, piped_from=previous, stdin=_Stdin())
            simple = child.type in ("command", "redirected_statement") and len(parsed.commands) > before
            previous = parsed.commands[before] if simple else None
        return
    if kind == "redirected_statement":
        body_node = node.child_by_field_name("body")
        feed = _redirects(node.children_by_field_name("redirect"), parsed, stdin)
        before = len(parsed.commands)
        if body_node is not None:
            _walk(body_node, parsed, piped_in=piped_in, piped_from=piped_from, stdin=feed)
        body = parsed.commands[before] if body_node is not None and len(parsed.commands) > before else None
        for child in node.named_children:
            if child == body_node:
                continue
            # tree-sitter-bash hangs what follows a here-doc's start (`cat <<EOF | sh`) under it:
            # a pipeline there reads the body's output.
            for inner in child.named_children if child.type == "heredoc_redirect" else (child,):
                tail = inner.type == "pipeline" and child.type == "heredoc_redirect"
                _walk(inner, parsed, piped_in=tail, piped_from=body if tail else None, stdin=_Stdin())
        return
    for child in node.children if node.has_error else node.named_children:
        _walk(child, parsed, piped_in=False, piped_from=None, stdin=_Stdin())


def _arithmetic_names(text: str) -> bool:
    """Whether arithmetic ``text`` reads a variable (or a computed word), not only numbers."""
    return _ARITHMETIC_NAME.search(_ARITHMETIC_LITERAL.sub("0", text)) is not None


def _evaluated_text(node: tree_sitter.Node) -> str | None:
    """The construct, when ``node`` makes bash evaluate text that is not provably literal as
    code (an arithmetic expression, a subscript, a prompt expansion, an indirection)."""
    kind = node.type
    text = _text(node)
    if kind == "arithmetic_expansion" and _arithmetic_names(text[2:]):
        return "arithmetic on a variable (bash evaluates its text, and a subscript there runs commands)"
    if kind == "compound_statement" and text.startswith("((") and _arithmetic_names(text):
        return "arithmetic on a variable (bash evaluates its text, and a subscript there runs commands)"
    if kind == "c_style_for_statement":
        body = node.child_by_field_name("body")
        header = text[: body.start_byte - node.start_byte] if body is not None else text
        if _arithmetic_names(header.replace("for", "", 1).replace("do", "")):
            return "a for (( )) loop on variables (bash evaluates their text, and a subscript there runs commands)"
    if kind == "subscript":
        index = node.child_by_field_name("index")
        value = static_value(index) if index is not None else None
        if value is None or not (value.isdigit() or value in ("@", "*")):
            return (
                "an array subscript that is not a literal number (bash evaluates it, and it can run commands)"
            )
    if kind == "expansion":
        if text.endswith("@P}"):
            return "a prompt expansion `@P` (it runs the command substitutions in the variable's text)"
        if text.startswith("${!") and not _NAME_LIST.match(text):
            return "an indirect expansion `${!…}` (the variable it names may hold a subscript that runs commands)"
        substring = _SUBSTRING.match(text)
        if substring is not None and _arithmetic_names(substring.group(1)):
            return "a substring offset on a variable (bash evaluates it as arithmetic)"
    if kind in ("unary_expression", "binary_expression") and node.parent is not None:
        operator = node.child_by_field_name("operator")
        op = _text(operator) if operator is not None else ""
        if kind == "unary_expression" and op == "-v":
            operand = node.named_children[-1]
            value = static_value(operand)
            if value is None or ("[" in value and not re.fullmatch(r"[A-Za-z_]\w*\[\d+\]", value)):
                return "a `-v` test of a name that is not literal (its subscript runs commands)"
        if kind == "binary_expression" and op in _ARITHMETIC_TESTS and _in_test(node):
            sides = [node.child_by_field_name("left"), node.child_by_field_name("right")]
            if any(side is None or _arithmetic_names(_text(side)) for side in sides):
                return f"an arithmetic `{op}` test on a variable (bash evaluates its text as arithmetic)"
    return None


def _declared(node: tree_sitter.Node) -> str | None:
    """A word of ``declare``/``export``/``unset`` (None for an assignment: its name is read from
    its source text)."""
    if node.type == "variable_assignment":
        return None
    return _text(node) if node.type == "variable_name" else static_value(node)


def _in_test(node: tree_sitter.Node) -> bool:
    parent = node.parent
    while parent is not None and parent.type in (
        "binary_expression",
        "unary_expression",
        "parenthesized_expression",
    ):
        parent = parent.parent
    return parent is not None and parent.type == "test_command" and _text(parent).startswith("[[")


def _command(
    node: tree_sitter.Node, parsed: Parsed, *, piped_in: bool, piped_from: Command | None, stdin: _Stdin
) -> None:
    name = node.child_by_field_name("name")
    word_nodes = ([name] if name is not None else []) + node.children_by_field_name("argument")
    words = tuple(static_value(w) for w in word_nodes)
    raw = tuple(_text(w) for w in word_nodes)
    line = node.start_point[0] + 1
    stdin = _redirects(node.children_by_field_name("redirect"), parsed, stdin)
    if word_nodes:
        if words[0] is None:
            parsed.problems.append(Problem("a computed command name", _short(raw[0]), line))
        parsed.commands.append(
            Command(
                words,
                raw,
                line,
                stdin.script,
                piped_in,
                piped_from,
                stdin.file,
                stdin.unknown,
            )
        )
    # Substitutions inside the words, assignments and redirects run commands of their own.
    for child in node.children if node.has_error else node.named_children:
        _walk(child, parsed, piped_in=False, piped_from=None, stdin=_Stdin())
