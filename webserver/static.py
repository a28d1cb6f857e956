"""Files under the static mount (--static-path-route, --static-path-mount): the server's own, read in a thread,
with Last-Modified and If-Modified-Since; a path that is not such a file goes to the application."""
from __future__ import annotations

import asyncio
import email.utils
import mimetypes
from pathlib import Path

from .interface import Response


async def static_file(loop: asyncio.AbstractEventLoop, mount: tuple[str, Path], path: str,
                      if_modified_since: str | None) -> Response | None:
    """A file under the static mount (None when there is no such file: the application answers then)."""
    route, root = mount
    relative = path[len(route):]
    if not relative.startswith("/") or "\x00" in relative or ".." in relative.split("/"):
        return None
    try:
        return await loop.run_in_executor(None, read_static, root, relative.lstrip("/"), if_modified_since)
    except OSError:
        return None


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def read_static(root: Path, relative: str, if_modified_since: str | None) -> Response | None:
    target = (root / relative).resolve()
    if root not in target.parents or not target.is_file():
        return None
    stat = target.stat()
    last_modified = email.utils.formatdate(stat.st_mtime, usegmt=True).encode()
    headers = [(b"last-modified", last_modified), (b"cache-control", b"public, max-age=3600")]
    if if_modified_since:
        try:
            since = email.utils.parsedate_to_datetime(if_modified_since).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            since = None
        if since is not None and int(stat.st_mtime) <= since:
            return 304, headers, b""
    kind, encoding = mimetypes.guess_type(target.name)
    if kind is None or encoding is not None:
        kind = "application/octet-stream"
    elif kind.startswith("text/") or kind in ("application/javascript", "application/json"):
        kind += "; charset=utf-8"
    return 200, [(b"content-type", kind.encode()), *headers], target.read_bytes()

