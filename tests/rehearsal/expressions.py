"""GitHub Actions' expression language, as much of it as the workflows use: literals, contexts with `.` and
`[]`, `! == != < <= > >= && ||` (with GitHub's loose equality: strings case-insensitive, other types
compared as numbers; `&&`/`||` give an operand, not a boolean), and the functions success(), always(),
failure(), cancelled(), startsWith, endsWith, contains, format, join, fromJSON, toJSON. A construct outside
that subset is an error, never a guess: the rehearsal must not read a workflow otherwise than GitHub does."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().,\[\]*])"
                    r"|(?P<id>[A-Za-z_][A-Za-z0-9_-]*))")
_INTERPOLATION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
STATUS_FUNCTIONS = ("success", "always", "failure", "cancelled")


class ExpressionError(Exception):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise ExpressionError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def truthy(value: Any) -> bool:
    return not (value is None or value is False or value == "" or (isinstance(value, (int, float))
                                                                    and not isinstance(value, bool) and value == 0))


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return math.nan
    return math.nan


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if a is None and b is None:
        return True
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b  # objects and arrays are equal only to themselves
    return _number(a) == _number(b)


def to_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class _Parser:
    def __init__(self, text: str, contexts: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> None:
        self.text, self.tokens, self.i = text, _tokens(text), 0
        self.contexts, self.functions = contexts, functions

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise ExpressionError(f"unexpected end of {self.text!r}")
        token = self.tokens[self.i]
        if want is not None and token[1] != want:
            raise ExpressionError(f"expected {want!r}, got {token[1]!r} in {self.text!r}")
        self.i += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.i != len(self.tokens):
            raise ExpressionError(f"unexpected {self.peek()!r} in {self.text!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        left = self.unary()
        op = self.peek()
        if op in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            right = self.unary()
            if op == "==":
                return _equal(left, right)
            if op == "!=":
                return not _equal(left, right)
            a, b = (left.lower(), right.lower()) if isinstance(left, str) and isinstance(right, str) \
                else (_number(left), _number(right))
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            return float(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind != "id":
            raise ExpressionError(f"unexpected {text!r} in {self.text!r}")
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self.peek() == "(":
            self.take()
            args = []
            while self.peek() != ")":
                args.append(self.or_())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            if text not in self.functions:
                raise ExpressionError(f"function {text}() is not part of the rehearsal's subset ({self.text!r})")
            return self.functions[text](*args)
        if text not in self.contexts:
            raise ExpressionError(f"unknown context {text!r} in {self.text!r}")
        value = self.contexts[text]
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = to_string(self.or_())
                self.take("]")
            value = value.get(key) if isinstance(value, dict) else None
        return value


def _format(template: str, *args: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: to_string(args[int(m.group(1))]), template)


def evaluate(text: str, contexts: dict[str, Any], status: dict[str, bool] | None = None) -> Any:
    """One expression (the inside of ${{ }}); `status` answers success()/always()/failure()/cancelled()."""
    status = status or {"success": True, "always": True, "failure": False, "cancelled": False}
    functions: dict[str, Callable[..., Any]] = {name: (lambda n=name: status[n]) for name in STATUS_FUNCTIONS}
    functions.update({
        "startsWith": lambda s, p: to_string(s).lower().startswith(to_string(p).lower()),
        "endsWith": lambda s, p: to_string(s).lower().endswith(to_string(p).lower()),
        "contains": lambda s, x: (any(_equal(i, x) for i in s) if isinstance(s, list)
                                  else to_string(x).lower() in to_string(s).lower()),
        "format": _format,
        "join": lambda items, sep=",": to_string(sep).join(to_string(i) for i in items),
        "fromJSON": lambda s: json.loads(to_string(s)),
        "toJSON": lambda v: json.dumps(v, indent=2),
    })
    return _Parser(text, contexts, functions).parse()


def interpolate(value: Any, contexts: dict[str, Any]) -> Any:
    """A workflow value with its ${{ }} evaluated: a whole-string expression keeps its type (a matrix, a
    boolean input), text around expressions makes a string."""
    if isinstance(value, dict):
        return {k: interpolate(v, contexts) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, contexts) for v in value]
    if not isinstance(value, str):
        return value
    whole = _INTERPOLATION.fullmatch(value.strip())
    if whole and "${{" not in whole.group(1):
        return evaluate(whole.group(1), contexts)
    return _INTERPOLATION.sub(lambda m: to_string(evaluate(m.group(1), contexts)), value)


def condition(value: Any, contexts: dict[str, Any], status: dict[str, bool]) -> bool:
    """A job's or step's `if:`: with or without ${{ }}; success() is implied unless a status function is used."""
    if value is None:
        return status["success"]
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    whole = _INTERPOLATION.fullmatch(text)
    text = whole.group(1) if whole else text
    if not any(re.search(rf"\b{name}\s*\(", text) for name in STATUS_FUNCTIONS):
        text = f"success() && ({text})"
    return truthy(evaluate(text, contexts, status))
