"""Random schemas of the whole structured-output subset against an independent validator:
a seeded generator nests every supported keyword in random combinations (objects, maps
with propertyNames and counts, arrays, tuples, sets, strings with lengths, patterns and
formats, numbers with bounds and multiples, enums short and long, anyOf, oneOf by kind,
by values and by discriminator, type lists, $ref and recursion). Each schema the compiler
takes gets random documents from json_walk (walked byte by byte through the matcher), and
each document must load with Python's json module and validate with the `jsonschema`
package (Draft 2020-12, the format checks of _formats.py). A schema it refuses must say
why; most must be taken. Skipped without python3-jsonschema.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from _util import skip

try:
    import jsonschema
except ImportError as e:
    skip(f"python3-jsonschema not available ({e})")

from _formats import format_checker

PATTERNS = ["^[a-z]+$", "^\\d{2,4}$", "^[A-Z][a-z]*( [a-z]+)?$", "x", "^(ab|c)+$",
            "^[^\\s]{1,3}$", "\\d", "^.{0,4}$", "^[0-9a-f]{4}-[0-9a-f]{2}$",
            "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$",
            "^(?!^[-+.]*$)[+-]?0*(?:\\d{0,3}|(?=[\\d.]{1,5}0*$)\\d{0,2}\\.\\d{0,2}0*$)",
            "^(?=.*\\d)(?!.*\\s)\\w{2,6}$", "^(?!xy)[xyz]{1,3}(x$|z)"]
FORMATS = ["date", "time", "date-time", "duration", "uuid", "ipv4", "ipv6", "hostname",
           "email", "uri"]
VALUES = [1, 2.5, -3, "a", "b", "ab", None, True, False, [1], {"k": 1}, [], {}]


class Generator:
    """Random schemas: `schema()` returns one, its $defs gathered at the top."""

    def __init__(self, rng):
        self.rng = rng
        self.defs = {}

    def schema(self):
        self.defs = {}
        root = self.node(0)
        if self.defs:
            root = dict(root) if isinstance(root, dict) else {"allOf": [root]}
            root["$defs"] = self.defs
        return root

    def node(self, depth):
        rng = self.rng
        leaves = ["string", "pattern", "format", "integer", "number", "enum", "long_enum",
                  "const", "boolean", "null", "any", "typelist"]
        inner = ["object", "object", "map", "array", "set", "tuple", "anyOf", "oneOf_kinds",
                 "oneOf_values", "oneOf_objects", "ref", "recursive"]
        kind = rng.choice(leaves + (inner if depth < 3 else []))
        return getattr(self, "k_" + kind)(depth)

    def maybe(self, p=0.5):
        return self.rng.random() < p

    def counts(self, s, low_key, high_key, low, spread):
        """Sometimes a lower count up to `low`, sometimes an upper one at most `spread` above."""
        if self.maybe():
            s[low_key] = self.rng.randint(0, low)
        if self.maybe():
            s[high_key] = s.get(low_key, 0) + self.rng.randint(0, spread)
        return s

    def k_string(self, depth):
        return self.counts({"type": "string"}, "minLength", "maxLength", 3, 6)

    def k_pattern(self, depth):
        s = {"type": "string", "pattern": self.rng.choice(PATTERNS)}
        if self.maybe(0.3):
            s["maxLength"] = self.rng.randint(2, 8)
        return s

    def k_format(self, depth):
        s = {"type": "string", "format": self.rng.choice(FORMATS)}
        if self.maybe(0.2):
            s["maxLength"] = self.rng.randint(20, 60)
        return s

    def bounds(self, s, integer):
        rng = self.rng
        lo = rng.randint(-50, 50)
        hi = lo + rng.randint(0, 120)
        if self.maybe():
            s["exclusiveMinimum" if self.maybe(0.3) else "minimum"] = (
                lo + 0.5 if integer and self.maybe(0.2) else lo)
        if self.maybe():
            s["exclusiveMaximum" if self.maybe(0.3) else "maximum"] = hi
        if self.maybe(0.3):
            s["multipleOf"] = rng.choice([1, 2, 3, 5, 7, 10, 25])
        return s

    def k_integer(self, depth):
        return self.bounds({"type": "integer"}, True)

    def k_number(self, depth):
        return self.bounds({"type": "number"}, False)

    def values(self, low=1, high=4):
        # Distinct as JSON values (1 and 1.0 would be one).
        return self.rng.sample(VALUES, self.rng.randint(low, high))

    def k_enum(self, depth):
        return {"enum": self.values()}

    def k_long_enum(self, depth):
        # Past 64 values an enum is matched by runs of its sorted values.
        pool = [f"s{i}" for i in range(300)] + list(range(0, 3000, 7)) + ["é", "", None]
        return {"enum": self.rng.sample(pool, self.rng.randint(65, 400))}

    def k_const(self, depth):
        return {"const": self.rng.choice(VALUES)}

    def k_boolean(self, depth):
        return {"type": "boolean"}

    def k_null(self, depth):
        return {"type": "null"}

    def k_any(self, depth):
        return self.rng.choice([{}, True, {"description": "anything"}])

    def k_typelist(self, depth):
        types = self.rng.sample(["string", "integer", "number", "boolean", "null", "array"],
                                self.rng.randint(2, 3))
        s = {"type": types}
        if "string" in types and self.maybe():
            s["maxLength"] = self.rng.randint(1, 5)
        if "array" in types and self.maybe():
            s["maxItems"] = self.rng.randint(0, 3)
        return s

    def k_object(self, depth):
        names = self.rng.sample(["a", "b", "id", "name", "x_y", "n"], self.rng.randint(0, 4))
        s = {"type": "object", "properties": {n: self.node(depth + 1) for n in names}}
        s["required"] = [n for n in names if self.maybe()]
        if self.maybe():
            s["additionalProperties"] = self.rng.choice([False, True, {"type": "integer"}])
        return s

    def k_map(self, depth):
        s = {"type": "object", "additionalProperties": self.node(depth + 1)}
        if self.maybe(0.4):
            keys = self.rng.sample(["k1", "k2", "key", "z"], self.rng.randint(1, 4))
            s["propertyNames"] = {"enum": keys}
            if self.maybe():
                s["minProperties"] = self.rng.randint(0, len(keys))
        elif self.maybe(0.4):
            s["propertyNames"] = self.rng.choice(
                [{"pattern": "^[a-z]+$", "maxLength": 4}, {"format": "date"},
                 {"type": "string", "minLength": 2, "maxLength": 3}])
        if self.maybe(0.4):
            s["maxProperties"] = self.rng.randint(0, 3)
        return s

    def k_array(self, depth):
        return self.counts({"type": "array", "items": self.node(depth + 1)}, "minItems",
                           "maxItems", 2, 3)

    def k_set(self, depth):
        items = self.rng.choice([{"enum": self.values(1, 5)}, {"type": "boolean"},
                                 {"type": "string", "enum": ["a", "b", "c"]},
                                 {"type": "string"},
                                 {"type": "string", "maxLength": self.rng.randint(0, 2)},
                                 {"type": "integer"},
                                 {"type": "integer", "minimum": self.rng.randint(-3, 3),
                                  "maximum": self.rng.randint(3, 12)}])
        s = {"type": "array", "items": items, "uniqueItems": True}
        if self.maybe():
            s["maxItems"] = self.rng.randint(0, 4)
        return s

    def k_tuple(self, depth):
        s = {"type": "array",
             "prefixItems": [self.node(depth + 1) for _ in range(self.rng.randint(1, 3))]}
        if self.maybe():
            s["items"] = self.rng.choice([False, self.node(depth + 1)])
        if self.maybe():
            s["minItems"] = self.rng.randint(0, len(s["prefixItems"]))
        return s

    def k_anyOf(self, depth):
        return {"anyOf": [self.node(depth + 1) for _ in range(self.rng.randint(1, 3))]}

    def k_oneOf_kinds(self, depth):
        # Alternatives of different first characters: no document is two alternatives'.
        pool = [self.k_string, self.k_integer, self.k_null, self.k_boolean, self.k_array,
                self.k_object]
        return {"oneOf": [f(depth + 1) for f in self.rng.sample(pool, self.rng.randint(2, 4))]}

    def k_oneOf_values(self, depth):
        # Lists of values no two share, beside one alternative of another kind.
        values = self.rng.sample(VALUES, self.rng.randint(2, 6))
        alts, i = [], 0
        while i < len(values):
            n = self.rng.randint(1, 2)
            part = values[i:i + n]
            alts.append({"const": part[0], "title": "one"} if len(part) == 1 else {"enum": part})
            i += n
        if self.maybe():
            alts.append(self.rng.choice([{"type": "integer", "minimum": 100},
                                         {"type": "string", "pattern": "^x"}]))
        return {"oneOf": alts}

    def k_oneOf_objects(self, depth):
        tags = self.rng.sample(["cat", "dog", 1, None, "bird"], self.rng.randint(2, 3))
        alts = []
        for t in tags:
            o = self.k_object(depth + 1)
            o["properties"] = dict(o["properties"])
            o["properties"]["kind"] = {"const": t}
            o["required"] = list(dict.fromkeys(o["required"] + ["kind"]))
            name = f"Alt{len(self.defs)}"
            self.defs[name] = o
            alts.append({"$ref": f"#/$defs/{name}"})
        return {"oneOf": alts, "discriminator": {"propertyName": "kind"}}

    def k_ref(self, depth):
        name = f"D{len(self.defs)}"
        self.defs[name] = {}  # reserved before its own nodes add theirs
        self.defs[name] = self.node(depth + 1)
        return {"$ref": f"#/$defs/{name}", "description": "a reference"}

    def k_recursive(self, depth):
        name = f"R{len(self.defs)}"
        self.defs[name] = {"type": "object", "required": ["v"],
                           "properties": {"v": self.node(3),
                                          "next": {"anyOf": [{"$ref": f"#/$defs/{name}"},
                                                             {"type": "null"}]}}}
        return {"$ref": f"#/$defs/{name}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json-walk", required=True)
    ap.add_argument("--schemas", type=int, default=1000)
    ap.add_argument("--documents", type=int, default=8)
    ap.add_argument("--seed", type=int, default=20261206)
    args = ap.parse_args()
    if not os.path.exists(args.json_walk):
        skip(f"{args.json_walk} not built")
    gen = Generator(random.Random(args.seed))
    schemas = [gen.schema() for _ in range(args.schemas)]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "schemas.json")
        with open(path, "w") as f:
            json.dump(schemas, f)
        out = subprocess.run([args.json_walk, path, str(args.documents), str(args.seed)],
                             capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"json_walk failed ({out.returncode}): {out.stderr.strip()}")
    checker = format_checker()
    refused, documents = {}, [0] * len(schemas)
    for line in out.stdout.split("\n"):  # not splitlines: documents hold U+2028 and the like
        if not line:
            continue
        row = json.loads(line)
        i = row["schema"]
        if "error" in row:
            if not row["error"]:
                sys.exit(f"schema {i} refused with no message: {json.dumps(schemas[i])}")
            refused[i] = row["error"]
            continue
        doc = json.loads(row["document"])
        try:
            jsonschema.Draft202012Validator(schemas[i], format_checker=checker).validate(doc)
        except jsonschema.ValidationError as e:
            sys.exit(f"schema {i} {json.dumps(schemas[i])}: {row['document']!r} is not "
                     f"valid: {e.message}")
        documents[i] += 1
    for i, n in enumerate(documents):
        if i not in refused and n != args.documents:
            sys.exit(f"schema {i}: {n} documents, expected {args.documents}")
    taken = len(schemas) - len(refused)
    print(f"{taken} of {len(schemas)} random schemas taken, {sum(documents)} documents valid; "
          f"{len(refused)} refused, e.g. {sorted(set(refused.values()))[:3]}")
    if taken < 0.7 * len(schemas):
        sys.exit(f"only {taken} of {len(schemas)} schemas taken")


if __name__ == "__main__":
    main()
