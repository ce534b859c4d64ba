"""``python -m pytest_adare.image``: the same as the ``adare-image`` command."""

import sys

from pytest_adare.image.cli import main

sys.exit(main())
