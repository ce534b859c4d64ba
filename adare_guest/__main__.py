"""``python -m adare_guest``: run the guest agent (see :mod:`adare_guest.cli`)."""

import sys

from adare_guest.cli import main

if __name__ == "__main__":
    sys.exit(main())
