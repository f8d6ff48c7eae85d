"""What a run was given that must not be written down: credentials in request headers, and the
request body. Results outlive the run and get shared (compare, CI artifacts), so every written file
carries redacted forms that keep what a comparison needs — the auth scheme, the length, a hash of
the body — and lose the secret. `--keep-secrets` writes them as given.
"""

from __future__ import annotations

import hashlib
import re

# Headers whose whole value is a credential, and name parts that mark one (X-Api-Key, X-Auth-Token).
SECRET_HEADERS = ("authorization", "cookie", "proxy-authorization")
SECRET_NAME_PARTS = ("key", "token", "secret", "auth")
# RFC 9110 §11.4: credentials = auth-scheme [ SP token68 / params ]: the scheme word is no secret.
_SCHEMED = ("authorization", "proxy-authorization")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*) +(.+)")
# --env NAME=VALUE of a --cmd server: names that mark a credential (API_TOKEN, DB_PASSWORD).
SECRET_ENV_PARTS = (*SECRET_NAME_PARTS, "pass", "credential")
# `run` options whose value may carry a secret, as they appear on a command line.
SECRET_OPTIONS = {"--header": "header", "--body": "body", "--env": "env"}


def is_secret_header(name: str) -> bool:
    low = name.strip().lower()
    return low in SECRET_HEADERS or any(part in low for part in SECRET_NAME_PARTS)


def header(text: str) -> str:
    """'Authorization: Bearer abc…' → 'Authorization: Bearer <redacted, 32 chars>'; other headers as given."""
    name, sep, value = text.partition(":")
    if not sep or not is_secret_header(name):
        return text
    value = value.strip()
    scheme = _SCHEME.fullmatch(value) if name.strip().lower() in _SCHEMED else None
    if scheme:
        return f"{name}: {scheme[1]} <redacted, {len(scheme[2])} chars>"
    return f"{name}: <redacted, {len(value)} chars>"


def body(text: str) -> str:
    """'<redacted body, 24 bytes, sha256:1a2b3c4d…>': two runs with different bodies still differ."""
    data = text.encode()
    return f"<redacted body, {len(data)} bytes, sha256:{hashlib.sha256(data).hexdigest()[:8]}…>"


def env_value(name: str, value: str) -> str:
    low = name.lower()
    return f"<redacted, {len(value)} chars>" if any(part in low for part in SECRET_ENV_PARTS) else value


def env_item(text: str) -> str:
    """'API_TOKEN=abc' → 'API_TOKEN=<redacted, 3 chars>'; other variables as given."""
    name, sep, value = text.partition("=")
    return f"{name}={env_value(name, value)}" if sep else text


def config(cfg: dict) -> dict:
    """A RunConfig dict (meta.json's `config`) with its headers, body and --env secrets redacted."""
    out = dict(cfg)
    if out.get("headers"):
        out["headers"] = [header(h) for h in out["headers"]]
    if out.get("body") is not None:
        out["body"] = body(out["body"])
    if out.get("env"):
        out["env"] = [env_item(e) for e in out["env"]]
    if out.get("own"):  # each --cmd server's spec holds its --env pairs too
        out["own"] = [dict(s, env=[(n, env_value(n, v)) for n, v in s["env"]]) if isinstance(s, dict) and s.get("env")
                      else s for s in out["own"]]
    return out


def argv(args: list[str]) -> list[str]:
    """The command line with the secrets of --header/--body/--env redacted (`--header X` and `--header=X`)."""
    out: list[str] = []
    pending = None  # the option whose value is the next argument
    for arg in args:
        if pending:
            out.append(_value(pending, arg))
            pending = None
            continue
        option, eq, value = arg.partition("=")
        if option in SECRET_OPTIONS and eq:
            out.append(f"{option}={_value(SECRET_OPTIONS[option], value)}")
        else:
            out.append(arg)
            pending = SECRET_OPTIONS.get(arg)
    return out


def _value(kind: str, value: str) -> str:
    return {"header": header, "body": body, "env": env_item}[kind](value)
