"""Suite-named built-in images (``debian:bullseye``): the name, and whether the mirror has it.

``split_suite`` is pure, so the recipe loader and the matrix can read a name without
the resolver; ``check_suite`` asks the mirror for ``dists/<suite>/Release`` (a second
or less) so an unknown suite fails before mmdebstrap spends minutes on it.
"""

from __future__ import annotations

import re

from pytest_adare.errors import ImageError
from pytest_adare.image.manifest import BUILTIN_IMAGES

DEFAULT_SUITE = "bookworm"
"""The suite of a built-in name without one (``debian``)."""
SUITE_CHECK_TIMEOUT = 15.0
# Debian's codenames and aliases (bullseye, stable, sid): never a path or a URL part.
_SUITE = re.compile(r"[a-z][a-z0-9.-]*")
KNOWN_SUITES = ("bullseye", "bookworm", "trixie")
"""The suites the built-in recipe is tested on (docs/images.md)."""


def split_suite(spec: str) -> tuple[str, str] | None:
    """``(built-in name, suite)`` for a built-in name with a suite; None for anything else.

    >>> split_suite("debian:bullseye"), split_suite("debian"), split_suite("img/debian:x")
    (('debian', 'bullseye'), None, None)

    :raise ImageError: a built-in name with an empty or malformed suite (``debian:``).
    """
    name, colon, suite = spec.partition(":")
    if not colon or name not in BUILTIN_IMAGES or "/" in spec:
        return None
    if not _SUITE.fullmatch(suite):
        raise ImageError(
            f"{spec!r}: {suite!r} is not a Debian suite name (lower-case letters, digits, "
            f"'.' or '-', e.g. {name}:{KNOWN_SUITES[0]})"
        )
    return name, suite


def check_suite(suite: str, mirror: str, timeout: float = SUITE_CHECK_TIMEOUT) -> None:
    """Ask ``mirror`` whether it has ``suite`` (its ``dists/<suite>/Release`` file).

    :raise ImageError: the mirror has no such suite, or cannot be reached (both name the
        suite and the mirror).
    """
    # Deferred: urllib.request pulls in http.client and ssl; only a build needs them.
    import urllib.error
    import urllib.request

    url = f"{mirror.rstrip('/')}/dists/{suite}/Release"
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's socket
        if exc.code != 404:
            raise ImageError(
                f"cannot check Debian suite {suite!r} at the mirror {mirror}: {url} "
                f"answered {exc.code} {exc.reason}"
            ) from exc
        raise ImageError(
            f"unknown Debian suite {suite!r}: the mirror {mirror} has no {url} (the "
            f"built-in images are tested on {', '.join(KNOWN_SUITES)})"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ImageError(
            f"no network: the build cannot reach the package mirror {mirror} to check "
            f"Debian suite {suite!r} ({reason})"
        ) from exc
