"""ISO 8601 strings to compare ``adare_guest.iso8601`` with Python 3.11's ``fromisoformat``.

``WELL_FORMED``: every combination of the date, separator, time and offset forms
ISO 8601 allows (3.11 reads them; out-of-range values such as ``25:00`` or
``2021-W53`` are in too, and must be refused alike). ``MALFORMED``: the same pieces
put together wrongly; a reader may refuse some that 3.11 is lenient with, but must
not accept one that 3.11 refuses.
"""

from __future__ import annotations

import itertools

DATES = ["2024-05-01", "20240501", "2024-W18-3", "2024W183", "2024-W18", "2024W18",
         "2020-W53-7", "2021-W53-1", "2024-02-30", "2024-W00-1", "2024-W18-8"]  # fmt: skip
SEPARATORS = ["T", " ", "t", "_"]
TIMES = ["10", "1000", "10:00", "100003", "10:00:03", "10:00:03.5", "10:00:03,5",
         "10:00:03.12", "10:00:03.123", "10:00:03.1234", "10:00:03.123456",
         "10:00:03.123456789", "100003.5", "100003,25", "25:00", "10:60", "23:59:60"]  # fmt: skip
OFFSETS = ["", "Z", "+01:00", "+0100", "+01", "-05:30", "+01:00:30", "+010030",
           "+01:00:30.5", "+00:00", "-0000", "+24:00", "+23:59"]  # fmt: skip
BAD_DATES = ["2024-0501", "202405-01", "2024-5-1", "24-05-01", "2024-W1", "2024-W18-", ""]
BAD_TIMES = ["1", "10:0003", "1000:03", "10:00:3", "10:00:03.", "10:00:03.x", "1:00", ""]
BAD_OFFSETS = ["+1", "+01:0", "z", "+01:00:", "UTC", " +01:00", "+0100:00"]

WELL_FORMED = [
    *DATES,
    *(d + s + t + o for d, s, t, o in itertools.product(DATES, SEPARATORS, TIMES, OFFSETS)),
]
MALFORMED = [
    *BAD_DATES,
    *(d + "T10:00" for d in BAD_DATES),
    *(f"2024-05-01T{t}{o}" for t, o in itertools.product(BAD_TIMES, OFFSETS)),
    *(f"2024-05-01T10:00:03{o}" for o in BAD_OFFSETS),
    *(f"20240501{s}1000" for s in ("", "1", "5")),
    "2024-05-01T", "2024-05-01TT10:00", "2024-05-01 10:00:03 ", " 2024-05-01",
]  # fmt: skip
