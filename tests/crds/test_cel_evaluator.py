"""The CEL subset evaluator (cel.py): CEL's results on the constructs the
CRD rules use, and a loud failure on anything else."""

import unittest

import cel

OBJECT = {
    "name": "a",
    "servers": [{"name": "x", "capacity": 2}, {"name": "y"}],
    "tags": {"k": "v"},
    "n": 3,
}


class CelEvaluatorTest(unittest.TestCase):
    def test_values(self):
        cases = [
            ("self.n == 3", True),
            ("self.n != 3", False),
            ("self.n >= 3 && self.n < 4", True),
            ("self.n > 3 || self.n <= 2", False),
            ("!(self.n == 3)", False),
            ("has(self.name)", True),
            ("has(self.missing)", False),
            ("has(self.servers[1].capacity)", False),
            ("size(self.servers) == 2", True),
            ("self.servers.size() == 2", True),
            ("size(self.name) == 1", True),
            ("self.servers[0].name == 'x'", True),
            ("self.tags['k'] == \"v\"", True),
            ("self.servers.all(s, has(s.name))", True),
            ("self.servers.all(s, has(s.capacity))", False),
            ("self.servers.exists(s, s.name == 'y')", True),
            ("self.servers.exists(s, s.name == 'z')", False),
            ("self.servers.exists_one(s, s.name == 'x')", True),
            ("[1, 1].exists_one(v, v == 1)", False),
            ("self.servers.all(s, self.servers.exists_one(t, t.name == s.name))", True),
            ("self.tags.all(k, k == 'k')", True),
            ("'/sap/'.startsWith('/') && '/sap/'.endsWith('/')", True),
            ("'abc'.contains('b')", True),
            ("'a*b'.matches('^[*]?[^*]*[*]?$')", False),
            ("'*.cgi'.matches('^[*]?[^*]*[*]?$')", True),
            ("'x'.matches('x')", True),
            ("self.n == 3 ? 'yes' : 'no'", "yes"),
            ("self.n == 4 ? 'yes' : self.name", "a"),
            ("self.name == 3", False),  # heterogeneous equality is false
            ("[1, 'a'] == [1, 'a']", True),
            ("null == null", True),
            ("'it\\'s' == \"it's\"", True),
            ("true != false", True),
        ]
        for rule, want in cases:
            with self.subTest(rule=rule):
                self.assertEqual(cel.evaluate(rule, OBJECT), want)

    def test_errors_absorbed_by_logical_operators(self):
        # CEL's commutative && and ||: an error on one side does not matter
        # when the other side decides.
        self.assertTrue(cel.evaluate("self.missing == 1 || true", OBJECT))
        self.assertFalse(cel.evaluate("self.missing == 1 && false", OBJECT))
        self.assertTrue(cel.evaluate("!has(self.missing) || self.missing == 1", OBJECT))
        with self.assertRaises(cel.CelError):
            cel.evaluate("self.missing == 1 || false", OBJECT)
        with self.assertRaises(cel.CelError):
            cel.evaluate("self.missing == 1 && true", OBJECT)

    def test_runtime_errors(self):
        for rule in ("self.missing == 1", "self.servers[5].name == 'x'", "self.n < 'a'",
                     "self.n.startsWith('a')", "size(self.n) == 1", "self.n ? 1 : 2",
                     "!self.name", "self.tags['nope'] == 1", "other == 1",
                     "self.servers.all(s, s.capacity >= 1)"):
            with self.subTest(rule=rule):
                with self.assertRaises(cel.CelError):
                    cel.evaluate(rule, OBJECT)

    def test_unsupported_syntax_fails_loudly(self):
        for rule in ("self.n + 1 == 4", "self.n - 1 == 2", "self.n * 2 == 6", "-1 < self.n",
                     "'a' in self.tags", "self.name.lowerAscii() == 'a'",
                     "self.servers.map(s, s.name) == []", "self.servers.filter(s, true) == []",
                     "int(self.name) == 1", "type(self.n) == int", "r'raw' == 'raw'",
                     "self.n == 1.5", "self.n == 3u", "{'a': 1} == self.tags",
                     "self.n == 1 == true", "has(self)", "self.name.startsWith()",
                     "self.n === 3", "self.n == 3;", "(self.n == 3", "self.all(1, true)",
                     "self.oldSelf == 1 ? : 2", "`x`"):
            with self.subTest(rule=rule):
                with self.assertRaises(cel.CelSyntaxError):
                    cel.evaluate(rule, OBJECT)


if __name__ == "__main__":
    unittest.main()
