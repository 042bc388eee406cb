"""The structured-output grammar against an independent JSON Schema validator: random
documents that the matcher admits for each schema below (json_walk writes them, byte by
byte from what the matcher allows) must load with Python's json module and validate with
the `jsonschema` package (Draft 2020-12, with the format checks it has), and strings of
the formats kvfold holds parse with Python's own date, time, uuid, ipaddress and e-mail
parsers or pass the RFC 1123 host name and RFC 3339 duration checks below. Skipped
without python3-jsonschema.
"""
import argparse
import datetime
import email.headerregistry
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import uuid

from _util import skip

try:
    import jsonschema
except ImportError as e:
    skip(f"python3-jsonschema not available ({e})")

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
        "link": {"type": "string", "format": "uri", "maxLength": 3}},
     "required": ["day", "at", "when", "id", "ip", "ip6", "host", "mail", "span"]},
    {"type": "object", "properties": {
        "step": {"type": "integer", "multipleOf": 7},
        "even": {"type": "integer", "multipleOf": 2, "minimum": -9, "exclusiveMaximum": 9},
        "round": {"type": "number", "multipleOf": 1000, "maximum": 0},
        "whole": {"multipleOf": 1, "minimum": 0, "maximum": 3},
        "tags": {"type": "array", "items": {"enum": ["a", "ab", 1, 10, 1.5, None, [1], {"k": 1}]},
                 "uniqueItems": True, "minItems": 1},
        "flags": {"items": {"type": "boolean"}, "uniqueItems": True}},
     "required": ["step", "even", "round", "whole", "tags", "flags"]},
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
    True,
    {},
]

# Formats whose values have a fixed shape, each checked by Python's own parser (the
# validator checks formats only with optional packages).
def check_hostname(text):
    """RFC 1123: labels of 1-63 letters, digits and hyphens, no hyphen at either end;
    253 characters at most."""
    if len(text) > 253:
        raise ValueError(f"{len(text)} characters")
    for label in text.split("."):
        if not 1 <= len(label) <= 63 or label[0] == "-" or label[-1] == "-" or not all(
                c.isascii() and (c.isalnum() or c == "-") for c in label):
            raise ValueError(f"label {label!r}")


def check_email(text):
    """RFC 5322's addr-spec as Python's e-mail package parses it, at a host name with a dot."""
    try:
        address = email.headerregistry.Address(addr_spec=text)
    except Exception as e:  # parse errors are not all ValueErrors
        raise ValueError(str(e))
    if address.addr_spec != text or "." not in address.domain:
        raise ValueError(f"read as {address.addr_spec!r}")
    check_hostname(address.domain)


def check_duration(text):
    """RFC 3339 appendix A: P, then years / months / days in order, none skipped between
    the first and last, and T with hours / minutes / seconds alike; or P and weeks alone."""
    if not text.startswith("P"):
        raise ValueError("no P")
    date, sep, clock = text[1:].partition("T")

    def units(part, order):
        found, digits = [], ""
        for c in part:
            if c.isascii() and c.isdigit():
                digits += c
            elif c in order and digits:
                found.append(order.index(c))
                digits = ""
            else:
                raise ValueError(f"{c!r} in {part!r}")
        if digits:
            raise ValueError(f"digits with no unit in {part!r}")
        if found and found != list(range(found[0], found[0] + len(found))):
            raise ValueError(f"units out of order or skipped in {part!r}")
        return found

    if date.endswith("W") and not sep and date[:-1].isascii() and date[:-1].isdigit():
        return
    if not units(date, "YMD") and not sep:
        raise ValueError("empty")
    if sep and not units(clock, "HMS"):
        raise ValueError("T with no time")


FORMATS = {
    "date": datetime.date.fromisoformat,
    "time": datetime.time.fromisoformat,
    "date-time": datetime.datetime.fromisoformat,
    "uuid": uuid.UUID,
    "ipv4": ipaddress.IPv4Address,
    "ipv6": ipaddress.IPv6Address,
    "hostname": check_hostname,
    "email": check_email,
    "duration": check_duration,
}


def check_formats(schema, doc, where):
    """Raises ValueError where a string of a checked format does not parse."""
    if not isinstance(schema, dict):
        return
    if isinstance(doc, str) and schema.get("format") in FORMATS:
        try:
            FORMATS[schema["format"]](doc)
        except ValueError as e:
            raise ValueError(f"{where}: {doc!r} is no {schema['format']}: {e}")
    if isinstance(doc, dict):
        for k, v in doc.items():
            check_formats(schema.get("properties", {}).get(k), v, f"{where}/{k}")
    if isinstance(doc, list):
        for j, v in enumerate(doc):
            check_formats(schema.get("items"), v, f"{where}/{j}")


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
            jsonschema.Draft202012Validator(
                SCHEMAS[i], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            ).validate(doc)
        except jsonschema.ValidationError as e:
            sys.exit(f"schema {i}: {row['document']!r} is not valid: {e.message}")
        try:
            check_formats(SCHEMAS[i], doc, "")
        except ValueError as e:
            sys.exit(f"schema {i}: {e}")
        counts[i] += 1
    for i, n in enumerate(counts):
        if n != args.documents:
            sys.exit(f"schema {i}: {n} documents, expected {args.documents}")
    print(f"{sum(counts)} documents of {len(SCHEMAS)} schemas valid")


if __name__ == "__main__":
    main()
