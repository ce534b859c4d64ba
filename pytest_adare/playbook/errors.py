"""The error of a bad experiment: which file, which line, which field, what is wrong."""

from __future__ import annotations

from pathlib import Path

from pytest_adare.errors import AdareError


class PlaybookError(AdareError):
    """A playbook or metadata file that cannot be read or run as written.

    ``str()`` is ``FILE:LINE: FIELD: MESSAGE`` (line and field when known), short and
    bounded: the message never quotes more than a line of the experiment.
    """

    def __init__(
        self, path: Path | str, message: str, *, line: int | None = None, field: str = ""
    ) -> None:
        self.path = Path(path)
        self.line = line
        self.field = field
        self.message = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")
