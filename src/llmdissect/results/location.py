"""Where a store lives: an SQLite file path, or a PostgreSQL server given as a URL.

`--db postgresql://user@host:5432/name` reaches the store through a `pathlib.Path` on the
command line, which folds the URL's `//` into one slash; the URL is recognised (and
restored) here, so every layer can pass a `--db` value along unchanged.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

_SERVER = re.compile(r"^(postgres|postgresql):/+(.*)$", re.DOTALL)


def server_url(location: str | os.PathLike | None) -> str | None:
    """The `postgresql://...` URL when `location` names a server, else None (a file)."""
    if location is None:
        return None
    m = _SERVER.match(os.fspath(location))
    return f"postgresql://{m.group(2)}" if m else None


def shown(url: str) -> str:
    """The URL with its password left out, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
