"""The one way a URL is printed or logged: without its secret (docs/security-bus.md).

``redacted`` keeps what tells an operator where a server is (scheme, user, host, port, path) and replaces
every secret with ``***``: a password in the user part; the user part itself for NATS (``nats://TOKEN@host``
is token authentication); any ``password``, ``token``, ``secret``, ``key`` or ``sslpassword`` parameter of
the query. A value listing several URLs (a NATS cluster, comma-separated) is redacted URL by URL.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
_SECRET_PARAMETERS = frozenset({"password", "pass", "token", "secret", "key", "sslpassword", "auth_token"})
_TOKEN_SCHEMES = frozenset({"nats", "tls", "ws", "wss"})


def redacted(url: str, *, mask: str = MASK) -> str:
    """``url`` (or a comma-separated list of URLs) with every secret replaced by ``mask``; with
    ``mask=""`` the secrets are left out instead (a URL a client can still use, taking its password from
    elsewhere: PGPASSWORD or ~/.pgpass for psql, a credentials file for NATS)."""
    if "," in url:
        return ",".join(redacted(part, mask=mask) for part in url.split(","))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL we can take apart: print nothing of what might be in it
        return MASK if "@" in url else url
    netloc = parts.netloc
    if "@" in netloc:
        user = parts.username or ""
        if parts.password is not None:
            userinfo = f"{user}:{mask}" if mask else user
        elif parts.scheme in _TOKEN_SCHEMES:
            userinfo = mask  # nats://TOKEN@host: the user part is the secret
        else:
            userinfo = user
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        netloc = f"{userinfo}@{host}" if userinfo else host
        netloc += f":{port}" if port else ""
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(name.lower() in _SECRET_PARAMETERS for name, _ in pairs):
            kept = [
                (name, mask if name.lower() in _SECRET_PARAMETERS else value)
                for name, value in pairs
                if mask or name.lower() not in _SECRET_PARAMETERS
            ]
            query = urlencode(kept, safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))
