"""``resourcesPolicy``: a sidecar's resources computed from the pod's app containers at pod creation
(OpenKruise 1.9, its pod webhook's ``applyResourcesPolicy`` and its resource expression calculator).

An expression is numbers (``2``, ``0.5``), percents (``50%`` = 0.5), quantities (``50m``, ``100Mi``,
``1Gi``), ``+ - * /``, parentheses, ``max(a, b)``, ``min(a, b)`` and one variable: ``memory`` when the
expression has that word, else ``cpu``, whose value is the aggregate of the field being computed.
Quantities follow Kubernetes' ``resource.Quantity`` as the calculator uses it: exact sums and comparisons,
products and quotients taken in millis and truncated, results printed in the canonical form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from services.model.sidecarset.core import InjectionError

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_DECIMAL_SUFFIXES = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_QUANTITY_RE = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(.*)$")
_EXPONENT_RE = re.compile(r"^[eE]([+-]?\d+)$")
# The units the calculator's lexer reads as a quantity; other letters after a number make a bad number (0).
_LEXER_UNITS = frozenset({"m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"})
_MEMORY_WORD = re.compile(r"\bmemory\b")


class QuantityError(ValueError):
    """Not a Kubernetes quantity, or not an expression the calculator evaluates."""


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes resource quantity: an exact value and the format it prints in."""

    value: Fraction
    format: str = DECIMAL_SI

    def milli(self) -> int:
        """``MilliValue``: the value in thousandths, rounded up."""
        return math.ceil(self.value * 1000)

    def __str__(self) -> str:
        return format_quantity(self)


def parse_quantity(text: Any) -> Quantity:
    """Kubernetes' ``ParseQuantity``: a decimal number with an SI (``m``, ``k``, ``M``…), binary (``Ki``,
    ``Mi``…) or exponent (``e3``) suffix."""
    match = _QUANTITY_RE.match(str(text).strip())
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity")
    sign, digits, suffix = match.groups()
    number = Fraction(digits) * (-1 if sign == "-" else 1)
    if suffix in _DECIMAL_SUFFIXES:
        return Quantity(number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix], DECIMAL_SI)
    if suffix in _BINARY_SUFFIXES:
        return Quantity(number * 1024 ** _BINARY_SUFFIXES[suffix], BINARY_SI)
    exponent = _EXPONENT_RE.match(suffix)
    if exponent is not None:
        return Quantity(number * Fraction(10) ** int(exponent.group(1)), DECIMAL_EXPONENT)
    raise QuantityError(f"{text!r} is not a quantity (unknown suffix {suffix!r})")


def from_milli(milli: int, fmt: str = DECIMAL_SI) -> Quantity:
    return Quantity(Fraction(milli, 1000), fmt)


def format_quantity(quantity: Quantity) -> str:
    """``Quantity.String()``: BinarySI as ``<n><Ki|Mi|…>`` when the value is a whole number of at least
    1024 (in magnitude), otherwise decimal with the largest SI suffix that keeps the mantissa whole."""
    value = quantity.value
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if quantity.format == BINARY_SI and value >= 1024 and value.denominator == 1:
        amount, times = int(value), 0
        while amount % 1024 == 0 and times < 6:
            amount, times = amount // 1024, times + 1
        suffix = {0: ""} | {v: k for k, v in _BINARY_SUFFIXES.items()}
        return f"{sign}{amount}{suffix[times]}"
    # Decimal: up to nano as Kubernetes rounds, factors of ten stripped, exponent lowered to a multiple of 3.
    nanos = math.ceil(value * 10**9)
    exponent = -9
    while nanos % 10 == 0:
        nanos, exponent = nanos // 10, exponent + 1
    drop = exponent % 3
    amount, exponent = nanos * 10**drop, exponent - drop
    if quantity.format == DECIMAL_EXPONENT:
        return f"{sign}{amount}" + (f"e{exponent}" if exponent else "")
    suffixes = {v: k for k, v in _DECIMAL_SUFFIXES.items()} | {-6: "u", -9: "n"}
    if exponent > 18:
        amount, exponent = amount * 10 ** (exponent - 18), 18
    return f"{sign}{amount}{suffixes[exponent]}"


# --- the expression calculator --------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A calculator value: a plain number or a quantity."""

    number: float = 0.0
    quantity: Quantity | None = None


def _as_quantity(value: Value) -> Quantity:
    if value.quantity is not None:
        return value.quantity
    return from_milli(int(value.number * 1000))


def _tokens(expression: str) -> list[tuple[str, str]]:
    """The calculator's lexer: (kind, text) with kind NUMBER, QUANTITY, IDENT or the character itself."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(expression)
    while i < n:
        ch = expression[i]
        if ch.isspace():
            i += 1
        elif ch in "+-*/(),":
            tokens.append((ch, ch))
            i += 1
        elif ch.isdigit() or ch == ".":
            start = i
            seen_dot = seen_e = seen_percent = expect_exponent = False
            while i < n:
                c = expression[i]
                if c.isdigit():
                    expect_exponent = False
                elif c == "." and not (seen_dot or seen_e or seen_percent):
                    seen_dot = True
                elif c in "eE" and not (seen_e or seen_percent):
                    seen_e = expect_exponent = True
                elif c in "+-" and expect_exponent:
                    expect_exponent = False
                elif c == "%" and not seen_percent:
                    seen_percent = True
                elif c.isalpha() and not expect_exponent:
                    while i < n and expression[i].isalpha():
                        i += 1
                    break
                else:
                    break
                i += 1
            text = expression[start:i]
            unit = re.sub(r"^[0-9.eE+-]*", "", text)
            is_quantity = unit != text and unit in _LEXER_UNITS
            tokens.append(("QUANTITY" if is_quantity else "NUMBER", text))
        elif ch.isalpha():
            start = i
            while i < n and (expression[i].isalnum() or expression[i] == "_"):
                i += 1
            tokens.append(("IDENT", expression[start:i]))
        else:
            tokens.append((ch, ch))
            i += 1
    return tokens


def _number(text: str) -> float:
    """The calculator's NUMBER: a float, a percent divided by 100; text that is neither reads as 0."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return 0.0


class _Parser:
    def __init__(self, expression: str, variables: Mapping[str, Value]) -> None:
        self.tokens = _tokens(expression)
        self.at = 0
        self.variables = variables

    def peek(self) -> str:
        return self.tokens[self.at][0] if self.at < len(self.tokens) else ""

    def take(self, kind: str) -> str:
        if self.peek() != kind:
            found = self.tokens[self.at][1] if self.at < len(self.tokens) else "end of expression"
            raise QuantityError(f"parse error: expected {kind!r}, found {found!r}")
        self.at += 1
        return self.tokens[self.at - 1][1]

    def expression(self) -> Value:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take(self.peek())
            right = self.term()
            value = _add(value, right, negate=op == "-")
        return value

    def term(self) -> Value:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take(self.peek())
            right = self.factor()
            value = _multiply(value, right) if op == "*" else _divide(value, right)
        return value

    def factor(self) -> Value:
        kind = self.peek()
        if kind == "NUMBER":
            return Value(number=_number(self.take(kind)))
        if kind == "QUANTITY":
            return Value(quantity=parse_quantity(self.take(kind)))
        if kind == "(":
            self.take("(")
            value = self.expression()
            self.take(")")
            return value
        if kind == "-":
            self.take("-")
            value = self.factor()
            if value.quantity is not None:
                return Value(quantity=Quantity(-value.quantity.value, value.quantity.format))
            return Value(number=-value.number)
        if kind == "IDENT":
            name = self.take(kind)
            if self.peek() == "(":
                self.take("(")
                args = [self.expression()]
                if self.peek() == ",":
                    self.take(",")
                    args.append(self.expression())
                self.take(")")
                return _call(name, args)
            variable = self.variables.get(name.lower())
            if variable is None:
                raise QuantityError(f"undefined variable: {name}")
            return variable
        raise QuantityError(f"parse error: unexpected {self.tokens[self.at][1] if kind else 'end'!r}")


def _add(left: Value, right: Value, *, negate: bool) -> Value:
    if left.quantity is None and right.quantity is None:
        return Value(number=left.number - right.number if negate else left.number + right.number)
    a, b = _as_quantity(left), _as_quantity(right)
    # Quantity.Add keeps the left format, or takes the right one when the left is zero.
    fmt = b.format if a.value == 0 else a.format
    return Value(quantity=Quantity(a.value - b.value if negate else a.value + b.value, fmt))


def _multiply(left: Value, right: Value) -> Value:
    if left.quantity is not None and right.quantity is not None:
        raise QuantityError("multiplication of two quantities")
    if left.quantity is not None:
        return Value(
            quantity=from_milli(int(float(left.quantity.milli()) * right.number), left.quantity.format)
        )
    if right.quantity is not None:
        return Value(
            quantity=from_milli(int(float(right.quantity.milli()) * left.number), right.quantity.format)
        )
    return Value(number=left.number * right.number)


def _divide(left: Value, right: Value) -> Value:
    if right.quantity is not None:
        raise QuantityError("division by quantity")
    if right.number == 0:
        raise QuantityError("division by zero")
    if left.quantity is not None:
        return Value(
            quantity=from_milli(int(float(left.quantity.milli()) / right.number), left.quantity.format)
        )
    return Value(number=left.number / right.number)


def _call(name: str, args: Sequence[Value]) -> Value:
    function = name.lower()
    if function not in ("max", "min"):
        raise QuantityError(f"unknown function: {name}")
    if len(args) != 2:
        raise QuantityError(f"{function} function requires exactly 2 arguments, got {len(args)}")
    left, right = args
    if left.quantity is None and right.quantity is None:
        pick_left = left.number >= right.number if function == "max" else left.number <= right.number
        return left if pick_left else right
    a, b = _as_quantity(left), _as_quantity(right)
    pick_left = a.value >= b.value if function == "max" else a.value <= b.value
    return Value(quantity=a if pick_left else b)


def evaluate(expression: str, variables: Mapping[str, Value]) -> Value:
    """The calculator's ``Parse``: the expression's value; a negative result is an error."""
    parser = _Parser(expression, variables)
    if not parser.tokens:
        raise QuantityError("parse error: empty expression")
    value = parser.expression()
    if parser.at != len(parser.tokens):
        raise QuantityError(f"parse error: unexpected {parser.tokens[parser.at][1]!r}")
    amount = value.quantity.value if value.quantity is not None else value.number
    if amount < 0:
        raise QuantityError(f"calculation result is negative: {value.quantity or value.number}")
    return value


def check_expression(expression: str, resource: str) -> None:
    """The SidecarSet webhook's check: the expression evaluates with the field's resource (``cpu`` or
    ``memory``) set to the number 1."""
    evaluate(expression, {resource: Value(number=1.0)})


def resource_value(expression: str, aggregate: Quantity) -> Quantity:
    """One computed field: the variable (``memory`` if the word is there, else ``cpu``) is ``aggregate``; a
    plain-number result is cores for CPU (in millis, truncated) and bytes for memory."""
    variable = "memory" if _MEMORY_WORD.search(expression) else "cpu"
    value = evaluate(expression, {variable: Value(quantity=aggregate)})
    if value.quantity is not None:
        return value.quantity
    if variable == "cpu":
        return from_milli(int(value.number * 1000))
    return Quantity(Fraction(int(value.number)), DECIMAL_SI)


# --- the policy ---------------------------------------------------------------------------------------

SUM = "sum"
MAX = "max"
_RESOURCES = ("cpu", "memory")
_ZERO = Quantity(Fraction(0), "")  # an absent request: Kubernetes' zero Quantity


def _quantity_of(container: Mapping[str, Any], kind: str, resource: str) -> Quantity | None:
    value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
    return None if value is None else parse_quantity(value)


def aggregate(
    containers: Sequence[Mapping[str, Any]], mode: str
) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    """The targets' limits and requests, summed or the largest. A limit exists only if every target sets
    it (else unlimited: absent); a request missing on a target counts as 0 (absent when all are 0)."""
    limits: dict[str, Quantity] = {}
    requests: dict[str, Quantity] = {}
    if mode not in (SUM, MAX):
        return limits, requests
    for resource in _RESOURCES:
        found = [_quantity_of(c, "limits", resource) for c in containers]
        if found and all(q is not None for q in found):
            limits[resource] = _combine([q for q in found if q is not None], mode)
        present = [q for q in (_quantity_of(c, "requests", resource) for c in containers) if q is not None]
        if present:
            total = _combine(present, mode)
            if mode == MAX or total.value != 0:
                requests[resource] = total
    return limits, requests


def _combine(quantities: Sequence[Quantity], mode: str) -> Quantity:
    if mode == MAX:
        best = quantities[0]
        for quantity in quantities[1:]:
            if quantity.value > best.value:
                best = quantity
        return best
    total = Quantity(Fraction(0), DECIMAL_SI)
    for quantity in quantities:
        total = Quantity(total.value + quantity.value, quantity.format if total.value == 0 else total.format)
    return total


def target_containers(
    pod: Mapping[str, Any], name_regex: str, sidecar_names: Iterable[str]
) -> list[Mapping[str, Any]]:
    """The pod's native-sidecar init containers (``restartPolicy: Always``), then its containers, whose
    name the regex finds (anywhere in the name), leaving out every container name of the matched
    SidecarSets."""
    pattern = re.compile(name_regex)
    excluded = set(sidecar_names)
    spec = pod.get("spec") or {}
    candidates = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    candidates += list(spec.get("containers") or [])
    return [
        c for c in candidates if c.get("name") not in excluded and pattern.search(str(c.get("name") or ""))
    ]


def computed_resources(
    policy: Mapping[str, Any], pod: Mapping[str, Any], sidecar_names: Iterable[str]
) -> dict[str, Any]:
    """The ``resources`` a sidecar with this ``resourcesPolicy`` gets in ``pod`` (as submitted, before
    injection). Raises InjectionError when no container is a target or an expression fails."""
    regex = str(policy.get("targetContainersNameRegex") or ".*")
    targets = target_containers(pod, regex, sidecar_names)
    if not targets:
        raise InjectionError(f"resourcesPolicy: no containers match the regex pattern {regex!r}")
    try:
        limits, requests = aggregate(targets, str(policy.get("targetContainersMode") or ""))
        expressions = policy.get("resourcesExpr") or {}
        limit_expressions = expressions.get("limits") or {}
        request_expressions = expressions.get("requests") or {}
        computed_limits = {
            resource: str(resource_value(limit_expressions[resource], limits[resource]))
            for resource in _RESOURCES
            if limit_expressions.get(resource) and resource in limits
        }
        computed_requests = {
            resource: str(resource_value(request_expressions[resource], requests.get(resource, _ZERO)))
            for resource in _RESOURCES
            if request_expressions.get(resource)
        }
    except QuantityError as err:
        raise InjectionError(f"resourcesPolicy: {err}") from None
    result: dict[str, Any] = {}
    if computed_limits:
        result["limits"] = computed_limits
    if computed_requests:
        result["requests"] = computed_requests
    return result
