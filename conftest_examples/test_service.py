"""Test your own service from the host, as CI would, on every Debian it supports: one
recipe (``service/service.toml``) makes an image per suite with what the service needs,
the project's folder is shared into the guest, the service starts from it, and host-side
code talks to it through a forwarded port (no fixed host port: parallel runs never
collide). Each test runs on Debian 11 and 12 (ids ``service-bullseye``,
``service-bookworm``).

    pytest --adare-vm=debian conftest_examples/test_service.py
    pytest --adare-vm=debian conftest_examples/test_service.py -k service-bullseye  # one
"""

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pytest_adare.guest import Guest
from pytest_adare.plugin.image_facts import ImageInfo

SERVICE = Path(__file__).parent / "service"
pytestmark = pytest.mark.adare_vm(
    image=str(SERVICE / "service.toml"), share={str(SERVICE): "/src"}, ports=[8000]
)
PYTHON = {"service-bullseye": "3.9.", "service-bookworm": "3.11."}
"""What each suite's python3 is: the point of running on both."""


@pytest.fixture
def service(guest: Guest) -> Guest:
    guest.shell("exec python3 /src/app.py 8000", background=True).check()
    guest.wait_for_port(8000, timeout=300, from_host=True)  # python under TCG: seconds
    return guest


def test_health_answers_from_the_host(service: Guest, adare_image: ImageInfo) -> None:
    with urllib.request.urlopen(service.url(8000, "/health"), timeout=60) as answer:
        body = json.load(answer)
    assert body["status"] == "ok"
    assert body["python"].startswith(PYTHON[adare_image.name])
    probe = "import platform, yaml; print(platform.python_version(), yaml.__version__)"
    assert service.succeed(f'python3 -c "{probe}"').split() == [body["python"], body["yaml"]]


def test_unknown_routes_are_404_and_posts_echo(service: Guest) -> None:
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(service.url(8000, "/nowhere"), timeout=60)
    assert missing.value.code == 404
    missing.value.close()  # an HTTPError holds the answer's connection
    request = urllib.request.Request(service.url(8000, "/echo"), data=b'{"n": 1}', method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert json.load(answer) == {"echo": {"n": 1}}
    as_yaml = urllib.request.Request(
        service.url(8000, "/echo"), data=b"n: 1\nnames: [a, b]\n", method="POST",
        headers={"Content-Type": "application/yaml"},
    )  # fmt: skip
    with urllib.request.urlopen(as_yaml, timeout=60) as answer:
        assert json.load(answer) == {"echo": {"n": 1, "names": ["a", "b"]}}
