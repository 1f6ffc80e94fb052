"""The console's page, script, styles and the vendored terminal (``codemode/console/static``).

Only files that ship in that directory are served, by their name there (no path is built from
a request); each is read once and kept (the largest, xterm.js, is ~300 KB).
"""

from __future__ import annotations

import functools
import importlib.resources

from starlette.responses import Response

from codemode.console._guard import HEADERS

__all__ = ["StaticFiles"]

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}


class StaticFiles:
    """The files under ``static/`` with a known type, by their relative name."""

    @functools.cached_property
    def _names(self) -> frozenset[str]:
        root = importlib.resources.files("codemode.console") / "static"
        names: set[str] = set()
        stack = [(root, "")]
        while stack:
            folder, prefix = stack.pop()
            for item in folder.iterdir():
                if item.is_dir():
                    stack.append((item, f"{prefix}{item.name}/"))
                elif any(item.name.endswith(suffix) for suffix in _TYPES):
                    names.add(prefix + item.name)
        return frozenset(names)

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one instance per front, kept for its life
    def _read(self, name: str) -> bytes:
        return (importlib.resources.files("codemode.console") / "static" / name).read_bytes()

    def response(self, name: str) -> Response:
        """The file ``name`` (404 when it is not one of them)."""
        if name not in self._names:
            return Response("not found", status_code=404, media_type="text/plain", headers=HEADERS)
        suffix = name[name.rfind(".") :]
        headers = {**HEADERS, "Cache-Control": "no-cache"}
        return Response(self._read(name), media_type=_TYPES[suffix], headers=headers)
