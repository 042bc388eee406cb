"""Format checks for the structured-output tests: every format kvfold holds to a shape,
each read by Python's own parser where it has one (date, time, uuid, ipaddress, e-mail,
URLs) and otherwise checked against its RFC here (host names, durations), as a
jsonschema.FormatChecker that applies them wherever a schema names a format.
"""
import datetime
import email.headerregistry
import ipaddress
import string
import urllib.parse
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


# RFC 3986: a path segment's characters (pchar: unreserved, sub-delims, ':', '@'), and a
# query's or fragment's (pchar, '/', '?'); percent-escapes of two hex digits too.
_PCHAR = set(string.ascii_letters + string.digits + "-._~" + "!$&'()*+,;=" + ":@")
_QCHAR = _PCHAR | set("/?")


def _check_chars(part, allowed, what):
    i = 0
    while i < len(part):
        if part[i] == "%" and all(c in string.hexdigits for c in part[i + 1:i + 3]) \
                and len(part[i + 1:i + 3]) == 2:
            i += 3
        elif part[i] in allowed:
            i += 1
        else:
            raise ValueError(f"{part[i]!r} in the {what}")


def check_uri(text):
    """An RFC 3986 URI as urllib splits it, of the http(s) scheme: a host name (RFC 1123),
    a port in 1-65535, and a path, query and fragment of the RFC's characters."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"scheme {parts.scheme!r}, host {parts.hostname!r}")
    check_hostname(parts.hostname)
    if parts.port is not None and not 1 <= parts.port <= 65535:  # .port raises past 65535
        raise ValueError(f"port {parts.port}")
    # (urllib gives the host name in lower case.)
    if parts.netloc.lower() != parts.hostname + ("" if parts.port is None else f":{parts.port}"):
        raise ValueError(f"netloc {parts.netloc!r}")
    for segment in parts.path.split("/"):
        _check_chars(segment, _PCHAR, "path")
    _check_chars(parts.query, _QCHAR, "query")
    _check_chars(parts.fragment, _QCHAR, "fragment")


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
    "uri": check_uri,
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
