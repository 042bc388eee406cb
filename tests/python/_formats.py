"""Format checks for the structured-output tests: every format kvfold holds to a shape,
each read by Python's own parser where it has one (date, time, uuid, ipaddress, e-mail)
and otherwise checked against its RFC here (host names, durations), as a
jsonschema.FormatChecker that applies them wherever a schema names a format.
"""
import datetime
import email.headerregistry
import ipaddress
import uuid

import jsonschema


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


def format_checker():
    """A FormatChecker with the checks above (a string that does not parse fails its
    format; values of other types pass, as JSON Schema has formats)."""
    checker = jsonschema.FormatChecker(formats=())
    for name, parse in FORMATS.items():
        def check(value, parse=parse):
            if isinstance(value, str):
                parse(value)
            return True
        checker.checks(name, raises=ValueError)(check)
    return checker
