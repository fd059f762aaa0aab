"""What a secret is, and how dlinfra removes secrets from everything it writes.

Why one module: artifacts, logs, stored rows, reports and error lines must
all be scrubbed the same way, and a secret is recognised two ways:

* by value: every value registered here (:func:`register`) is replaced
  wherever it appears, whatever surrounds it. The registry is filled from the
  controller's environment (variables whose names look secret, and the
  password of any URL in any variable), from inventories (``ansible_password``,
  ``ansible_become_password`` ...), extra vars and ``clouds.yaml`` auth sections;
* by pattern, with nothing registered: URL passwords (``scheme://user:PW@`` and
  ``?password=PW``), ``NAME=value`` / ``"name": "value"`` / ``name: value``
  where NAME looks secret, and PEM private key blocks.

Every secret becomes :data:`MASK`. Values shorter than :data:`MIN_LENGTH`
characters, and words such as ``true``, are never registered: redacting them
would garble every text. This module is the controller's (standard library
only); the payload never imports it. Note that ``import secrets`` elsewhere
still means the standard library's module (absolute imports).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus, unquote, unquote_plus

T = TypeVar("T")

#: What every secret is replaced with.
MASK = "***"

#: The environment of every Ansible process dlinfra starts: Ansible's own log (``ANSIBLE_LOG_PATH``, or
#: ``log_path`` in an ansible.cfg of the working folder) would hold whole inventories, passwords included,
#: where no scrubbing reaches. dlinfra keeps its own scrubbed artifacts instead.
NO_ANSIBLE_LOG = {"ANSIBLE_LOG_PATH": os.devnull}

#: Shorter values are never registered (redacting "ab" everywhere would garble every text).
MIN_LENGTH = 4

#: Values that are never secrets whatever their variable is called (``HOST_KEY_CHECKING=False``).
_BORING = frozenset({"", "true", "false", "yes", "no", "none", "null", "on", "off", "unset", MASK})

#: A name token that makes a name secret on its own.
_SECRET_TOKENS = frozenset(
    {
        "password", "passwd", "passphrase", "pass", "pwd", "secret", "secrets", "token", "psk",
        "credential", "credentials", "passwords", "apikey", "privatekey", "accesskey", "secretkey",
    }
)  # fmt: skip
#: A token ending like this is secret too (``sslpassword``, ``PGPASSWORD``, ``clientsecret``, ``authtoken``).
_SECRET_SUFFIXES = ("password", "passwd", "passphrase", "secret", "token", "apikey")
#: ``*_key`` is secret (``API_KEY``, ``ssh_key``) unless the word before says it is a lookup key.
_HARMLESS_KEY_QUALIFIERS = frozenset(
    {"cache", "sort", "deps", "base", "scale", "ps", "mode", "run", "dict", "lookup", "primary", "foreign",
     "partition", "group", "index", "metadata", "keep", "map", "hash", "row", "column", "cell", "dedup", "cluster"}
)  # fmt: skip
#: A name with one of these tokens names something public (``public_key``, ``authorized_key``).
_PUBLIC_TOKENS = frozenset({"public", "pub", "authorized", "known", "fingerprint"})
#: A name ending with one of these names where a secret is, or what kind it is, not the secret.
_HARMLESS_LAST = frozenset(
    {"file", "files", "path", "dir", "directory", "url", "uri", "name", "names", "type", "size", "id", "ids",
     "length", "len", "format", "prefix", "suffix", "env", "var", "mode", "expiry", "expires", "expiration",
     "ttl", "user", "username", "count", "source", "policy", "min", "max", "required", "enabled", "endpoint",
     "location", "host", "port", "timeout", "method", "algorithm", "kind", "checking", "authentication",
     "through", "context", "rate", "command", "prompt", "program", "helper", "store", "backend"}
)  # fmt: skip
#: Names that match the rules but are well known not to be secrets.
_NOT_SECRET = frozenset({"pwd", "oldpwd"})
#: Explicit secret names the token rules would miss.
_ALWAYS_SECRET = frozenset({"aws_access_key_id"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def _tokens(name: str) -> list[str]:
    return [t for t in _SPLIT.split(_CAMEL.sub("_", name).lower()) if t]


def is_secret_name(name: str) -> bool:
    """True when a variable, key or parameter called ``name`` holds a secret (``OS_PASSWORD``, ``api_key``)."""
    low = name.lower()
    if low in _ALWAYS_SECRET:
        return True
    if low in _NOT_SECRET:
        return False
    tokens = _tokens(name)
    if not tokens or tokens[-1] in _HARMLESS_LAST or _PUBLIC_TOKENS.intersection(tokens):
        return False
    for i, word in enumerate(tokens):
        if word in _SECRET_TOKENS or word.endswith(_SECRET_SUFFIXES):
            return True
        if word == "key" and i > 0 and tokens[i - 1] not in _HARMLESS_KEY_QUALIFIERS:
            return True
    return False


# -- the registry of values ---------------------------------------------------

_lock = threading.Lock()
_values: set[str] = set()
_compiled: re.Pattern[str] | None = None


def _worth_registering(text: str) -> bool:
    return len(text) >= MIN_LENGTH and text.strip().lower() not in _BORING


def register(value: object) -> None:
    """Redact ``value`` from now on, in every form it may be written in (JSON-escaped, URL-encoded)."""
    global _compiled
    if value is None or isinstance(value, bool | dict | list | tuple | set):
        return
    text = str(value)
    if not _worth_registering(text):
        return
    forms = {text, text.strip(), json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    forms |= {quote(text, safe=""), quote_plus(text)}
    if "%" in text or "+" in text:
        forms |= {unquote(text), unquote_plus(text)}
    with _lock:
        new = {f for f in forms if _worth_registering(f)} - _values
        if new:
            _values.update(new)
            _compiled = None


def registered() -> frozenset[str]:
    """Every value registered so far (each form counts)."""
    with _lock:
        return frozenset(_values)


def clear() -> None:
    """Forget every registered value (tests)."""
    global _compiled
    with _lock:
        _values.clear()
        _compiled = None


def _values_pattern() -> re.Pattern[str] | None:
    """One alternation of every value, longest first, so a value holding another is replaced whole."""
    global _compiled
    with _lock:
        if _compiled is None and _values:
            ordered = sorted(_values, key=lambda v: (-len(v), v))
            _compiled = re.compile("|".join(re.escape(v) for v in ordered))
        return _compiled


# -- patterns that need no registration -------------------------------------

_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|.*)", re.S
)
#: Where a bare value ends: before a blank, a quote or ``&``, leaving punctuation that ends a sentence (``URL: ...``).
_END = r"(?=[.,;:)\]]*(?:[\s&#'\"\\]|$))"
#: ``scheme://user:PASSWORD@``: group 1 is kept. The password runs to the ``@`` before the host (the last one
#: before the path): one with an unencoded ``@`` (``u:p@ss@host``) is masked whole, however a client splits it.
#: The lookbehind anchors the scheme at its first letter: without it a long run of letters is quadratic.
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@?#'\"]*):([^\s'\"]*?)@(?=[^\s@/?#'\"]*(?:[/?#\s'\"]|$))"
)
#: Query parameters that carry credentials whatever the rest of the name rules say (``?key=`` too).
_QUERY_NAMES = r"password|passwd|pass|pwd|token|secret|key|apikey|api_key|access_token|sslpassword|sig|signature"
_URL_QUERY = re.compile(rf"([?&;](?:{_QUERY_NAMES})=)([^&#\s'\"\\]*?){_END}", re.I)
#: ``NAME=value`` (environment lines, libpq DSNs, ``-e name=value``); value quoted or up to a blank.
_ASSIGN = re.compile(rf"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_.-]*)(=)(\"[^\"\n]*\"|'[^'\n]*'|[^\s&'\"\\]+?{_END})")
#: ``"name": "value"`` and ``'name': 'value'`` (JSON, Python reprs, Ansible's debug output).
_QUOTED = re.compile(r"([\"'])([A-Za-z_][A-Za-z0-9_.-]*)\1(\s*:\s*)([\"'])((?:\\.|(?!\4)[^\\\n])*)\4")
#: ``name: value`` on a YAML-ish line (a bare value up to the end of the line).
_YAML = re.compile(r"(?m)^([ \t]*(?:-[ \t]+)?)([A-Za-z_][A-Za-z0-9_.-]*)([ \t]*:[ \t]+)([^\s{\[|>&*#].*?)[ \t]*$")


def _maskable(value: str) -> bool:
    bare = value.strip("\"'")
    return bool(bare) and bare.lower() not in _BORING and not bare.startswith("{{")


def _sub_assign(m: re.Match[str]) -> str:
    name, sep, value = m.groups()
    return f"{name}{sep}{MASK}" if is_secret_name(name) and _maskable(value) else m.group(0)


def _sub_quoted(m: re.Match[str]) -> str:
    q, name, sep, vq, value = m.groups()
    return f"{q}{name}{q}{sep}{vq}{MASK}{vq}" if is_secret_name(name) and _maskable(value) else m.group(0)


def _sub_yaml(m: re.Match[str]) -> str:
    lead, name, sep, value = m.groups()
    return f"{lead}{name}{sep}{MASK}" if is_secret_name(name) and _maskable(value) else m.group(0)


def _sub_userinfo(m: re.Match[str]) -> str:
    return f"{m.group(1)}:{MASK}@" if m.group(2) else m.group(0)


def _sub_query(m: re.Match[str]) -> str:
    return f"{m.group(1)}{MASK}" if m.group(2) else m.group(0)


def redact(text: str) -> str:
    """``text`` with every registered value and every pattern-recognised secret replaced by :data:`MASK`."""
    if not text:
        return text
    pattern = _values_pattern()
    if pattern is not None:
        text = pattern.sub(MASK, text)
    if "PRIVATE KEY" in text:
        text = _PEM.sub(MASK, text)
    if "://" in text:
        text = _URL_USERINFO.sub(_sub_userinfo, text)
    if "=" in text:
        text = _URL_QUERY.sub(_sub_query, text)
        text = _ASSIGN.sub(_sub_assign, text)
    if ":" in text:
        text = _QUOTED.sub(_sub_quoted, text)
        text = _YAML.sub(_sub_yaml, text)
    return text


def redact_url(url: str) -> str:
    """The URL for messages and logs: the userinfo password and password-like query parameters replaced."""
    return redact(url)


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact` for a file of any encoding: bytes that are not UTF-8 pass through untouched."""
    text = data.decode("utf-8", "surrogateescape")
    clean = redact(text)
    return data if clean == text else clean.encode("utf-8", "surrogateescape")


def redact_obj(obj: T, mask_secret_keys: bool = True) -> T:
    """A copy of a JSON-like value with every string redacted and secret-named keys' values masked.

    A container under a secret-named key (``credentials: {...}``) is masked whole. Data whose
    keys are the program's own (a result record's metrics) passes ``mask_secret_keys=False``.
    """
    if isinstance(obj, str):
        return redact(obj)  # type: ignore[return-value]
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            secret_key = mask_secret_keys and isinstance(key, str) and is_secret_name(key)
            if secret_key and value not in (None, "") and not isinstance(value, bool):
                out[key] = MASK
            else:
                out[key] = redact_obj(value, mask_secret_keys)
        return out  # type: ignore[return-value]
    if isinstance(obj, list | tuple):
        return type(obj)(redact_obj(v, mask_secret_keys) for v in obj)  # type: ignore[return-value]
    return obj


# -- filling the registry ------------------------------------------------------


def secrets_in_text(text: str) -> list[str]:
    """Secrets the patterns find in ``text``: URL passwords, secret query parameters, ``SECRET=value``."""
    found = [m.group(2) for m in _URL_USERINFO.finditer(text) if m.group(2)]
    # A password with an unencoded "@": a client that splits at the first one names the rest as the host.
    found += [part for m in _URL_USERINFO.finditer(text) for part in m.group(2).split("@")[1:]]
    found += [m.group(2) for m in _URL_QUERY.finditer(text) if m.group(2)]
    for m in _ASSIGN.finditer(text):
        if is_secret_name(m.group(1)) and _maskable(m.group(3)):
            found.append(m.group(3).strip("\"'"))
    return found


def register_text(text: str) -> None:
    """Register the secrets a text carries (``postgresql://u:PW@h/db``, ``...?password=PW``)."""
    for value in secrets_in_text(text):
        register(value)


def register_obj(obj: Any, secret: bool = False) -> None:
    """Register every secret of a JSON-like value: values of secret-named keys, and URL passwords in strings.

    For inventory host vars (``ansible_password``, ``ansible_become_pass`` ...), extra vars and
    ``clouds.yaml`` (``auth.password``, ``auth.token``, ``auth.application_credential_secret``).
    """
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            register_obj(value, secret or (isinstance(key, str) and is_secret_name(key)))
    elif isinstance(obj, list | tuple | set):
        for value in obj:
            register_obj(value, secret)
    elif isinstance(obj, str):
        if secret:
            register(obj)
        register_text(obj)
    elif secret and obj is not None and not isinstance(obj, bool):
        register(obj)


def register_host_vars(hosts: Iterable[Mapping[str, Any]]) -> None:
    """Register the secrets of inventory hosts' variables (one mapping per host)."""
    for hostvars in hosts:
        register_obj(hostvars)


def register_environ(environ: Mapping[str, str] | None = None) -> None:
    """Register the environment's secrets: values of secret-named variables, and passwords inside values."""
    for name, value in (os.environ if environ is None else environ).items():
        if name.lower() in _NOT_SECRET:
            continue
        if is_secret_name(name):
            register(value)
        if "=" in value or "://" in value:
            register_text(value)
