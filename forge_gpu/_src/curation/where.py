"""``--where`` expressions over per-episode values, evaluated safely and whole-column.

An expression is parsed with Python's ``ast`` (mode ``eval``) and evaluated by walking an allow-list of nodes, never
by ``eval``: ``and``, ``or``, ``not``; comparisons ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=`` (chained as in Python)
and ``in`` / ``not in`` against a tuple or list of constants (or a string ``in instruction``: the instruction holds
it); ``+``, ``-``, ``*``, ``/``, ``//``, ``%``, ``**`` and unary ``-``; ``abs(x)``; numbers, ``True``/``False`` and
strings; names; ``NAME[i]`` (a component of a vector param). Each name is one array with a value
per episode, so an expression is a few numpy operations over all episodes at once, whatever their number; every
operation is per episode, so evaluating the episodes in parts gives the same answer. ``return`` is a keyword of
Python; it is read as the name ``return`` here.

numpy and the standard library.
"""

from __future__ import annotations

import ast
import io
import operator
import tokenize
from collections.abc import Mapping

import numpy as np

#: The longest expression taken [characters].
MAX_LENGTH = 10_000


class ExpressionError(ValueError):
    """A ``--where`` expression that does not parse, names something unknown or mixes kinds of values."""


_RETURN = "__return__"  # what ``return`` is renamed to before parsing

_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


class Where:
    """A parsed expression; :meth:`evaluate` gives its boolean mask over episodes. ``names``: the names it uses."""

    def __init__(self, text: str, allowed: Mapping[str, tuple], unavailable: Mapping[str, str] | None = None):
        """Parse ``text``, whose names must be among ``allowed`` (name -> per-episode shape; ``()`` for a scalar,
        ``("str",)`` for a string value); ``unavailable``: names that exist elsewhere but not here, and why. Raises
        :class:`ExpressionError` in one line naming the allowed names."""
        self.unavailable = dict(unavailable or {})
        if not isinstance(text, str) or not text.strip():
            raise ExpressionError(f"where must be a non-empty expression, got {text!r}; {_listing(allowed)}")
        if len(text) > MAX_LENGTH:
            raise ExpressionError(f"where is {len(text)} characters long; at most {MAX_LENGTH}")
        self.text, self.allowed = text, dict(allowed)
        try:
            tree = ast.parse(_rename_return(text).strip(), mode="eval")
        except (SyntaxError, tokenize.TokenError, IndentationError) as exc:
            raise ExpressionError(f"where {text!r} does not parse ({exc.msg}); {_listing(allowed)}") from None
        except (RecursionError, MemoryError):
            raise ExpressionError(f"where {text!r} nests too deeply") from None
        self._tree = tree.body
        self.names = sorted({_shown(n) for n in self._names(self._tree)})

    def _names(self, node: ast.AST) -> list[str]:
        """Every name the expression reads; refuses a node outside the allow-list or an unknown name."""
        found = []
        called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and id(inner) not in called:
                if _shown(inner.id) in self.unavailable:
                    raise self._error(f"{_shown(inner.id)!r}: {self.unavailable[_shown(inner.id)]}")
                if _shown(inner.id) not in self.allowed:
                    raise self._error(f"unknown name {_shown(inner.id)!r}")
                found.append(inner.id)
            elif not isinstance(inner, _ALLOWED_NODES):
                raise self._error(f"{type(inner).__name__} ({ast.unparse(inner)!r}) is not allowed")
        return found

    def _error(self, what: str) -> ExpressionError:
        what = what.replace(_RETURN, "return")  # ast.unparse shows the parser's name for it
        return ExpressionError(f"where {self.text!r}: {what}; {_listing(self.allowed)}")

    def evaluate(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """The boolean mask ``[N]`` of the episodes the expression keeps, given each name's values (``[N, ...]``;
        only the names it uses are read). Raises :class:`ExpressionError` where the kinds of values do not fit
        (a vector param compared whole, a string compared with a number, ``and`` over numbers)."""
        count = len(next(iter(values.values()))) if values else 0
        with np.errstate(all="raise", under="ignore"):  # arithmetic that overflows or divides by zero is refused
            try:
                result = self._eval(self._tree, values)
            except ExpressionError:
                raise
            except RecursionError:
                raise self._error("it nests too deeply") from None
            except (TypeError, ValueError, IndexError, np.exceptions.DTypePromotionError) as exc:
                raise self._error(f"the values do not fit ({exc})") from None
        result = np.asarray(result)
        if result.dtype != bool:
            raise self._error("it gives numbers, not true/false (compare them, e.g. length < 80)")
        if result.ndim == 0:
            return np.full(count, bool(result))
        if result.shape != (count,):
            raise self._error("it gives a value per component of a vector param (index it, e.g. NAME[0])")
        return result

    def _eval(self, node: ast.AST, values: Mapping[str, np.ndarray]):
        if isinstance(node, ast.Constant):  # numbers as numpy's: fixed width, so no power of constants runs away
            value = node.value
            if isinstance(value, str):
                return value
            if isinstance(value, bool):
                return np.bool_(value)
            if isinstance(value, int) and -(2**63) <= value < 2**63:
                return np.int64(value)
            if isinstance(value, float):
                return np.float64(value)
            raise self._error(f"constant {node.value!r} is not a string, true/false or a number of 64 bits")
        if isinstance(node, ast.Name):
            return values[_shown(node.id)]
        if isinstance(node, ast.Subscript):
            base = self._eval(node.value, values)
            index = self._eval(node.slice, values)
            if not isinstance(index, np.integer) or np.ndim(base) < 2:
                raise self._error(f"{ast.unparse(node)!r}: index a vector param with an integer, e.g. NAME[0]")
            size = np.shape(base)[1]
            if not -size <= index < size:
                raise self._error(f"{ast.unparse(node)!r}: index out of range for a vector of {size}")
            return base[:, index]
        if isinstance(node, ast.BoolOp):
            parts = [self._truth(v, values) for v in node.values]
            reduce = np.logical_and.reduce if isinstance(node.op, ast.And) else np.logical_or.reduce
            return reduce(np.broadcast_arrays(*parts))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return np.logical_not(self._truth(node.operand, values))
            operand = self._number(node.operand, values)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp):
            return self._arithmetic(node, self._number(node.left, values), self._number(node.right, values))
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == "abs") or len(node.args) != 1 or node.keywords:
                raise self._error(f"{ast.unparse(node)!r}: the only call is abs(x)")
            return np.abs(self._number(node.args[0], values))
        if isinstance(node, ast.Compare):
            return self._compare(node, values)
        raise self._error(f"{ast.unparse(node)!r} cannot stand here")

    def _arithmetic(self, node: ast.BinOp, left, right):
        """``left OP right``, refused naming the expression where it divides by zero or leaves its 64 bits: numpy's
        floats raise under the caller's ``errstate``; its integers wrap around silently (``length ** 1000000``), so
        their result is checked against the same operation in floats."""
        op = _ARITHMETIC[type(node.op)]
        try:
            result = op(left, right)
        except (FloatingPointError, ZeroDivisionError, OverflowError) as exc:
            raise self._error(f"{ast.unparse(node)!r} {_arithmetic_failure(exc)}") from None
        if np.asarray(result).dtype.kind in "iu":
            with np.errstate(all="ignore"):
                wide = op(np.asarray(left, np.float64), np.asarray(right, np.float64))
            if not np.all(np.abs(wide) < 2.0**63):
                raise self._error(f"{ast.unparse(node)!r} overflows 64-bit integers")
        return result

    def _compare(self, node: ast.Compare, values: Mapping[str, np.ndarray]):
        result, left = True, self._eval(node.left, values)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                found = self._member(left, right_node, values)
                part = np.logical_not(found) if isinstance(op, ast.NotIn) else found
                right = None
            else:
                right = self._eval(right_node, values)
                if _is_text(left) != _is_text(right):
                    raise self._error(f"{ast.unparse(node)!r} compares a string with a number")
                if _is_text(left) and not isinstance(op, ast.Eq | ast.NotEq):
                    raise self._error(f"{ast.unparse(node)!r}: strings compare with == and != only")
                part = _COMPARE[type(op)](left, right)
            result = np.logical_and(result, part)
            left = right
        return result

    def _member(self, left, right_node: ast.AST, values: Mapping[str, np.ndarray]):
        """``left in right``: a value among constants, or a string within each episode's instruction."""
        if isinstance(right_node, ast.Tuple | ast.List):
            options = [self._eval(e, values) for e in right_node.elts]
            if any(not isinstance(o, np.generic | str) for o in options):
                raise self._error(f"{ast.unparse(right_node)!r}: `in` takes a tuple or list of constants")
            if any(_is_text(o) != _is_text(left) for o in options):
                raise self._error(f"{ast.unparse(right_node)!r} mixes strings and numbers with its left side")
            return np.isin(left, options) if options else np.zeros(np.shape(left), bool)
        right = self._eval(right_node, values)
        if isinstance(left, str) and _is_text(right):
            return np.strings.find(np.asarray(right, dtype=str), left) >= 0
        raise self._error(f"{ast.unparse(right_node)!r}: `in` takes (a, b, ...) or, for a string, instruction")

    def _truth(self, node: ast.AST, values: Mapping[str, np.ndarray]):
        value = self._eval(node, values)
        if np.asarray(value).dtype != bool:
            raise self._error(f"{ast.unparse(node)!r} is not true/false (and, or, not take comparisons or success)")
        return value

    def _number(self, node: ast.AST, values: Mapping[str, np.ndarray]):
        value = self._eval(node, values)
        if _is_text(value) or np.asarray(value).dtype == bool:
            raise self._error(f"{ast.unparse(node)!r} is not a number")
        return value


_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    *_ARITHMETIC,
    ast.Compare,
    *_COMPARE,
    ast.In,
    ast.NotIn,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Subscript,
    ast.Tuple,
    ast.List,
    ast.Call,
)


def _arithmetic_failure(exc: Exception) -> str:
    """What numpy's floating-point error says, in the words of a refusal."""
    text = str(exc)
    if "overflow" in text:
        return "overflows 64-bit floats"
    return "divides by zero" if "divide" in text or "remainder" in text else f"gives no number ({text})"


def _is_text(value) -> bool:
    return isinstance(value, str) or np.asarray(value).dtype.kind in "UST"


def _shown(name: str) -> str:
    """The name as the user writes it (``return``, renamed for the parser)."""
    return "return" if name == _RETURN else name


def _rename_return(text: str) -> str:
    """``text`` with the keyword ``return`` used as a name renamed so that Python's parser takes it; strings and
    other tokens unchanged."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text  # the parser says what is wrong
    if not any(t.type == tokenize.NAME and t.string == "return" for t in tokens):
        return text
    lines = text.splitlines(keepends=True) or [""]
    for t in reversed(tokens):  # right to left, so earlier positions stay valid
        if t.type == tokenize.NAME and t.string == "return":
            (row, start), (_, end) = t.start, t.end
            lines[row - 1] = lines[row - 1][:start] + _RETURN + lines[row - 1][end:]
    return "".join(lines)


def _listing(allowed: Mapping[str, tuple]) -> str:
    """The allowed names, with each vector's size: ``allowed names: success, return, ..., target_color[3]``."""

    def show(name: str, shape: tuple) -> str:
        return f"{name}{list(shape)}" if shape and shape != ("str",) else name

    return "allowed names: " + ", ".join(show(n, s) for n, s in allowed.items())
