"""Tools a test reaches for in the built-in console image work as their manuals say.

One VM for the module (``console_vm``).
"""

from __future__ import annotations

import secrets

import pytest

from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

PORT = 8091


def test_wget_with_a_timeout_fetches_a_page_from_a_local_server(console_vm: VM) -> None:
    # busybox's wget (the image's only one before Debian's was added) died of SIGSEGV
    # as soon as it was given -T.
    guest = console_vm.guest
    page = f"page-{secrets.token_hex(4)}"
    guest.succeed(f"mkdir -p /tmp/www && echo {page} > /tmp/www/index.html")
    guest.succeed(
        f"cd /tmp/www && (python3 -m http.server --bind 127.0.0.1 {PORT} >/tmp/www.log 2>&1 &)"
    )
    guest.wait_for_port(PORT, timeout=60)
    fetched = guest.shell(f"wget -T 5 -O - http://127.0.0.1:{PORT}/")
    assert (fetched.returncode, fetched.stdout) == (0, f"{page}\n"), fetched.stderr
    assert guest.succeed("command -v wget").strip() == "/usr/bin/wget"
