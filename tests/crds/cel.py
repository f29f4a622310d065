"""A small evaluator for exactly the CEL subset kwd's CRD rules use.

Debian ships no CEL library, so the tests evaluate the CRDs'
x-kubernetes-validations rules with this one. It knows:

  literals        integers, 'single' and "double" quoted strings (escapes
                  \\ \' \" only), true, false, null, [list, ...]
  names           self and macro variables
  selection       a.b (error when the field is absent, as in CEL), a[i], a['k']
  macros          has(a.b), list.all(x, p), list.exists(x, p),
                  list.exists_one(x, p) (maps iterate their keys)
  functions       size(x), x.size(), s.startsWith(t), s.endsWith(t),
                  s.contains(t), s.matches(re) (RE2 search; evaluated with
                  Python's re, so keep the expressions in their common part)
  operators       ! && || == != < <= > >= ?:

Anything else (arithmetic, `in`, other functions, raw strings, ...) raises
CelSyntaxError when the rule is parsed, so an unknown construct fails the
test instead of passing unchecked. Runtime errors (an absent field, a type
mismatch) raise CelError; && and || absorb an error when the other side
decides the result, as CEL does.
"""

import re

__all__ = ["CelError", "CelSyntaxError", "compile_rule", "evaluate"]


class CelError(Exception):
    """A CEL runtime error (the rule fails, as in the API server)."""


class CelSyntaxError(Exception):
    """Syntax outside the supported subset."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<int>\d+)(?![\w.])
    | (?P<str>'(?:[^'\\\n]|\\[\\'"])*'|"(?:[^"\\\n]|\\[\\'"])*")
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>&&|\|\||==|!=|<=|>=|[<>!?:.,()\[\]])
    )""",
    re.VERBOSE,
)

_RESERVED = {
    "in", "as", "break", "const", "continue", "else", "for", "function", "if",
    "import", "let", "loop", "package", "namespace", "return", "var", "void",
    "while",
}
_METHODS = {"startsWith", "endsWith", "contains", "matches", "size"}
_MACROS = {"all", "exists", "exists_one"}


def _tokenize(text):
    tokens = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise CelSyntaxError(f"unsupported syntax at {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "name" and value in _RESERVED:
            raise CelSyntaxError(f"unsupported keyword {value!r}")
        tokens.append((kind, value))
        pos = m.end()
    tokens.append(("end", None))
    return tokens


def _unquote(literal):
    body = literal[1:-1]
    return re.sub(r"\\([\\'\"])", r"\1", body)


class _Parser:
    def __init__(self, text):
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self, value=None):
        kind, tok = self.tokens[self.pos]
        if value is None:
            return kind, tok
        return kind == "op" and tok == value

    def take(self, value=None):
        kind, tok = self.tokens[self.pos]
        if value is not None and not (kind == "op" and tok == value):
            raise CelSyntaxError(f"expected {value!r}, got {tok!r}")
        self.pos += 1
        return kind, tok

    def parse(self):
        node = self.conditional()
        if self.peek()[0] != "end":
            raise CelSyntaxError(f"unexpected {self.peek()[1]!r}")
        return node

    def conditional(self):
        cond = self.logical_or()
        if self.peek("?"):
            self.take("?")
            then = self.conditional()
            self.take(":")
            other = self.conditional()
            return ("?:", cond, then, other)
        return cond

    def logical_or(self):
        node = self.logical_and()
        while self.peek("||"):
            self.take()
            node = ("||", node, self.logical_and())
        return node

    def logical_and(self):
        node = self.relation()
        while self.peek("&&"):
            self.take()
            node = ("&&", node, self.relation())
        return node

    def relation(self):
        node = self.unary()
        for op in ("==", "!=", "<=", ">=", "<", ">"):
            if self.peek(op):
                self.take()
                right = self.unary()
                if any(self.peek(o) for o in ("==", "!=", "<=", ">=", "<", ">")):
                    raise CelSyntaxError("chained comparison")
                return ("cmp", op, node, right)
        return node

    def unary(self):
        if self.peek("!"):
            self.take()
            return ("!", self.unary())
        return self.member()

    def member(self):
        node = self.primary()
        while True:
            if self.peek("."):
                self.take()
                kind, name = self.take()
                if kind != "name":
                    raise CelSyntaxError(f"expected a field or method name, got {name!r}")
                if self.peek("("):
                    node = self.method(node, name)
                else:
                    node = ("select", node, name)
            elif self.peek("["):
                self.take()
                index = self.conditional()
                self.take("]")
                node = ("index", node, index)
            else:
                return node

    def args(self):
        self.take("(")
        out = []
        if not self.peek(")"):
            out.append(self.conditional())
            while self.peek(","):
                self.take()
                out.append(self.conditional())
        self.take(")")
        return out

    def method(self, target, name):
        if name in _MACROS:
            self.take("(")
            kind, var = self.take()
            if kind != "name":
                raise CelSyntaxError(f"{name}() needs a variable name first")
            self.take(",")
            body = self.conditional()
            self.take(")")
            return ("macro", name, target, var, body)
        if name not in _METHODS:
            raise CelSyntaxError(f"unsupported method {name}()")
        args = self.args()
        expected = 0 if name == "size" else 1
        if len(args) != expected:
            raise CelSyntaxError(f"{name}() takes {expected} argument(s)")
        return ("call", name, target, args)

    def primary(self):
        kind, tok = self.take()
        if kind == "int":
            return ("lit", int(tok))
        if kind == "str":
            return ("lit", _unquote(tok))
        if kind == "name":
            if tok in ("true", "false"):
                return ("lit", tok == "true")
            if tok == "null":
                return ("lit", None)
            if self.peek("("):
                if tok == "has":
                    self.take("(")
                    arg = self.member()
                    self.take(")")
                    if arg[0] != "select":
                        raise CelSyntaxError("has() needs a field selection")
                    return ("has", arg[1], arg[2])
                if tok == "size":
                    args = self.args()
                    if len(args) != 1:
                        raise CelSyntaxError("size() takes one argument")
                    return ("call", "size", args[0], [])
                raise CelSyntaxError(f"unsupported function {tok}()")
            return ("name", tok)
        if kind == "op" and tok == "(":
            node = self.conditional()
            self.take(")")
            return node
        if kind == "op" and tok == "[":
            items = []
            if not self.peek("]"):
                items.append(self.conditional())
                while self.peek(","):
                    self.take()
                    items.append(self.conditional())
            self.take("]")
            return ("list", items)
        raise CelSyntaxError(f"unexpected {tok!r}")


def _type(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if value is None:
        return "null"
    raise CelError(f"unsupported value {value!r}")


def _bool(value, what):
    if not isinstance(value, bool):
        raise CelError(f"{what} needs a bool, got {_type(value)}")
    return value


def _equal(a, b):
    if _type(a) != _type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _eval(node, env):
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "name":
        if node[1] not in env:
            raise CelError(f"undeclared reference {node[1]!r}")
        return env[node[1]]
    if op == "list":
        return [_eval(item, env) for item in node[1]]
    if op == "select":
        target = _eval(node[1], env)
        if not isinstance(target, dict):
            raise CelError(f"cannot select {node[2]!r} from {_type(target)}")
        if node[2] not in target:
            raise CelError(f"no such key: {node[2]}")
        return target[node[2]]
    if op == "has":
        target = _eval(node[1], env)
        if not isinstance(target, dict):
            raise CelError(f"has() on {_type(target)}")
        return node[2] in target
    if op == "index":
        target = _eval(node[1], env)
        index = _eval(node[2], env)
        if isinstance(target, list) and _type(index) == "int":
            if not 0 <= index < len(target):
                raise CelError(f"index {index} out of range")
            return target[index]
        if isinstance(target, dict) and isinstance(index, str):
            if index not in target:
                raise CelError(f"no such key: {index}")
            return target[index]
        raise CelError(f"cannot index {_type(target)} with {_type(index)}")
    if op == "!":
        return not _bool(_eval(node[1], env), "!")
    if op in ("&&", "||"):
        decisive = op == "||"  # the value that decides the result on its own
        try:
            left = _bool(_eval(node[1], env), op)
        except CelError as error:
            right = _bool(_eval(node[2], env), op)
            if right == decisive:
                return decisive
            raise error
        if left == decisive:
            return decisive
        return _bool(_eval(node[2], env), op)
    if op == "?:":
        cond = _bool(_eval(node[1], env), "?:")
        return _eval(node[2] if cond else node[3], env)
    if op == "cmp":
        _, cmp, left_node, right_node = node
        left, right = _eval(left_node, env), _eval(right_node, env)
        if cmp == "==":
            return _equal(left, right)
        if cmp == "!=":
            return not _equal(left, right)
        if _type(left) != _type(right) or _type(left) not in ("int", "string"):
            raise CelError(f"no such overload: {_type(left)} {cmp} {_type(right)}")
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[cmp]
    if op == "call":
        _, name, target_node, arg_nodes = node
        target = _eval(target_node, env)
        args = [_eval(a, env) for a in arg_nodes]
        if name == "size":
            if _type(target) not in ("string", "list", "map"):
                raise CelError(f"no such overload: size({_type(target)})")
            return len(target)
        if not isinstance(target, str) or not isinstance(args[0], str):
            raise CelError(f"no such overload: {_type(target)}.{name}({_type(args[0])})")
        if name == "startsWith":
            return target.startswith(args[0])
        if name == "endsWith":
            return target.endswith(args[0])
        if name == "contains":
            return args[0] in target
        if name == "matches":
            return re.search(args[0], target) is not None
        raise CelSyntaxError(f"unsupported method {name}()")  # the parser stops these
    if op == "macro":
        _, name, target_node, var, body = node
        target = _eval(target_node, env)
        if isinstance(target, dict):
            elements = list(target.keys())
        elif isinstance(target, list):
            elements = target
        else:
            raise CelError(f"{name}() on {_type(target)}")
        results = []
        first_error = None
        for element in elements:
            try:
                results.append(_bool(_eval(body, {**env, var: element}), name))
            except CelError as error:
                if name == "exists_one":
                    raise
                first_error = first_error or error
        if name == "all":
            if False in results:
                return False
        elif name == "exists":
            if True in results:
                return True
        else:
            return results.count(True) == 1
        if first_error is not None:
            raise first_error
        return name == "all"
    raise CelSyntaxError(f"unknown node {op}")


def compile_rule(text):
    """Parses a rule; raises CelSyntaxError outside the subset."""
    return _Parser(text).parse()


def evaluate(rule, self_value):
    """Evaluates a rule (text or compiled) with `self` bound; returns its value."""
    tree = compile_rule(rule) if isinstance(rule, str) else rule
    return _eval(tree, {"self": self_value})
