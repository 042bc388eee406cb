"""The structured-output grammar against an independent JSON Schema validator: random
documents that the matcher admits for each schema below (json_walk writes them, byte by
byte from what the matcher allows) must load with Python's json module and validate with
the `jsonschema` package (Draft 2020-12), its format checks those of _formats.py: the
formats kvfold holds parse with Python's own date, time, uuid, ipaddress and e-mail
parsers or pass RFC 1123 host name and RFC 3339 duration checks. Skipped without
python3-jsonschema.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from _util import skip

try:
    import jsonschema
except ImportError as e:
    skip(f"python3-jsonschema not available ({e})")

from _formats import format_checker

SCHEMAS = [
    {"type": "object"},
    {"type": "object", "properties": {
        "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "id": {"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}$"},
        "word": {"type": "string", "pattern": "^\\w+(\\s\\w+)?$"},
        "not_space": {"type": "string", "pattern": "^\\S\\S?$"},
        "other": {"type": "string", "pattern": "^[^a-z\\d]{1,3}$"},
        "any": {"type": "string", "pattern": "^.{2}$"},
        "prefix": {"type": "string", "pattern": "^(ab|c)"},
        "short": {"type": "string", "pattern": "[0-9]", "minLength": 2, "maxLength": 4}},
     "required": ["date", "id", "word", "not_space", "other", "any", "short"]},
    {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0},
                                      {"type": "string", "maxLength": 3},
                                      {"enum": ["a", None]}],
     "items": {"type": "boolean"}, "maxItems": 5},
    {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
     "minItems": 2, "items": False},
    {"type": "object", "properties": {
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "offset": {"type": "integer", "exclusiveMinimum": -3.5, "exclusiveMaximum": 40},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "delta": {"type": "number", "exclusiveMinimum": -2, "exclusiveMaximum": 0},
        "far": {"type": "number", "minimum": -1e300, "maximum": 1e300},
        "low": {"maximum": -7}},
     "required": ["days", "offset", "ratio", "delta", "far", "low"]},
    {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "none": {"type": "null"}},
     "required": ["name", "ok"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["a", 1, 1.5, None, True, {"k": [1]}]},
     "minItems": 2, "maxItems": 4},
    {"type": ["string", "integer", "null"], "maxLength": 3},
    {"anyOf": [{"type": "string", "minLength": 4}, {"type": "array", "maxItems": 1},
               {"type": "object", "properties": {"x": {"const": 7}}, "required": ["x"]}]},
    {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    {"$ref": "#/$defs/node",
     "$defs": {"node": {"type": "object",
                        "properties": {"v": {"type": "integer"},
                                       "kids": {"type": "array", "maxItems": 2,
                                                "items": {"$ref": "#/$defs/node"}}},
                        "required": ["v"]}}},
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}}},
    {"type": "object", "properties": {"tag": {"enum": ["x", "y"]}},
     "additionalProperties": False, "title": "annotated", "description": "d"},
    {"type": "object", "properties": {
        "outer": {"type": "object", "properties": {
            "inner": {"type": "array", "items": {"type": "string", "format": "date"},
                      "minItems": 1}},
            "required": ["inner"]}},
     "required": ["outer"]},
    {"allOf": [{"type": "string", "minLength": 1, "maxLength": 1}]},
    {"definitions": {"n": {"type": "number"}},
     "type": "array", "items": {"$ref": "#/definitions/n"}, "maxItems": 3},
    {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "time"},
        "when": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"},
        "ip6": {"type": "string", "format": "ipv6"},
        "host": {"type": "string", "format": "hostname"},
        "mail": {"type": "string", "format": "email"},
        "span": {"type": "string", "format": "duration"},
        "link": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083},
        "other": {"type": "string", "format": "uri-reference", "maxLength": 3}},
     "required": ["day", "at", "when", "id", "ip", "ip6", "host", "mail", "span", "link"]},
    {"type": "object", "properties": {
        "step": {"type": "integer", "multipleOf": 7},
        "even": {"type": "integer", "multipleOf": 2, "minimum": -9, "exclusiveMaximum": 9},
        "round": {"type": "number", "multipleOf": 1000, "maximum": 0},
        "whole": {"multipleOf": 1, "minimum": 0, "maximum": 3},
        "tags": {"type": "array", "items": {"enum": ["a", "ab", 1, 10, 1.5, None, [1], {"k": 1}]},
                 "uniqueItems": True, "minItems": 1},
        "flags": {"items": {"type": "boolean"}, "uniqueItems": True},
        "letters": {"items": {"type": "string", "maxLength": 1}, "uniqueItems": True,
                    "minItems": 2},
        "words": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
                "minItems": 3},
        "ranks": {"type": "array", "items": {"type": "integer", "minimum": -1, "maximum": 3},
                  "uniqueItems": True, "minItems": 4}},
     "required": ["step", "even", "round", "whole", "tags", "flags", "letters", "words", "ids",
                  "ranks"]},
    {"type": "object", "properties": {
        "scores": {"type": "object", "propertyNames": {"enum": ["math", "art", "pe"]},
                   "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100},
                   "minProperties": 2},
        "labels": {"propertyNames": {"pattern": "^[a-z]{1,8}$"}, "maxProperties": 3,
                   "additionalProperties": {"type": "string", "maxLength": 4}},
        "days": {"propertyNames": {"format": "date"}, "additionalProperties": {"type": "boolean"}}},
     "required": ["scores", "labels", "days"]},
    # A discriminated union as Pydantic writes it (Union[Cat, Dog], Field(discriminator=...)):
    # the validator checks that each document is exactly one alternative's.
    {"$defs": {
        "Cat": {"type": "object", "title": "Cat", "required": ["pet_type", "lives"],
                "properties": {"pet_type": {"const": "cat", "title": "Pet Type", "type": "string"},
                               "lives": {"type": "integer", "minimum": 1, "maximum": 9}}},
        "Dog": {"type": "object", "title": "Dog", "required": ["pet_type"],
                "properties": {"name": {"type": "string", "maxLength": 6},
                               "pet_type": {"enum": ["dog", 1, None]}}}},
     "type": "object", "required": ["pets"],
     "properties": {"pets": {"type": "array", "maxItems": 4, "items": {
         "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}, {"type": "string"}],
         "discriminator": {"propertyName": "pet_type",
                           "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}}}}},
    # Labelled choices as forms write them: exactly one alternative each.
    {"type": "array", "maxItems": 4, "items": {"oneOf": [
        {"const": "red", "title": "Red"}, {"const": "green", "title": "Green"},
        {"enum": [1, 2.5, None]}, {"type": "boolean"},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]}},
    # Decimals as Pydantic writes them: a bare Decimal (a number or a string held to a
    # pattern with a negative lookahead), and condecimal(max_digits=7, decimal_places=2)
    # (a positive lookahead inside an alternative, '$' inside a group).
    {"type": "object", "title": "Invoice", "required": ["total", "unit", "discount"],
     "properties": {
         "total": {"anyOf": [{"type": "number"},
                             {"type": "string", "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}],
                   "title": "Total"},
         "unit": {"type": "string", "maxLength": 12,
                  "pattern": "^(?!^[-+.]*$)[+-]?0*(?:\\d{0,7}|(?=[\\d.]{1,8}0*$)"
                             "\\d{0,5}\\.\\d{0,2}0*$)"},
         "discount": {"anyOf": [{"type": "string",
                                 "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"},
                                {"type": "null"}]},
         "code": {"type": "string", "pattern": "^(?=.*\\d)(?!.*--)[a-z\\d-]{3,8}$"}}},
    # unevaluatedProperties / unevaluatedItems with no applicator beside them; annotations
    # of Draft 2020-12 (contentEncoding) and OpenAPI (nullable: no null is written).
    {"type": "object", "required": ["id", "pair"], "unevaluatedProperties": False,
     "properties": {
         "id": {"type": "integer"},
         "note": {"type": "string", "nullable": True, "maxLength": 5},
         "blob": {"type": "string", "contentEncoding": "base64", "maxLength": 8},
         "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "integer"}],
                  "unevaluatedItems": False}}},
    True,
    {},
]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json-walk", required=True)
    ap.add_argument("--documents", type=int, default=200)
    args = ap.parse_args()
    if not os.path.exists(args.json_walk):
        skip(f"{args.json_walk} not built")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "schemas.json")
        with open(path, "w") as f:
            json.dump(SCHEMAS, f)
        out = subprocess.run([args.json_walk, path, str(args.documents), "20261206"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    checker = format_checker()
    counts = [0] * len(SCHEMAS)
    for line in out.split("\n"):  # not splitlines: documents hold U+2028 and the like
        if not line:
            continue
        row = json.loads(line)
        i = row["schema"]
        if "error" in row:
            sys.exit(f"schema {i} refused: {row['error']}")
        doc = json.loads(row["document"])
        try:
            jsonschema.Draft202012Validator(SCHEMAS[i], format_checker=checker).validate(doc)
        except jsonschema.ValidationError as e:
            sys.exit(f"schema {i}: {row['document']!r} is not valid: {e.message}")
        counts[i] += 1
    for i, n in enumerate(counts):
        if n != args.documents:
            sys.exit(f"schema {i}: {n} documents, expected {args.documents}")
    print(f"{sum(counts)} documents of {len(SCHEMAS)} schemas valid")


if __name__ == "__main__":
    main()
