"""Moved to :mod:`pytest_adare.screen.match`; this module path stays for the imports
that name it (docs, users' tests)."""

from pytest_adare.screen.match import (
    Box,
    ImageNotFound,
    ImageStillShown,
    ImageWaitTimeout,
    Needle,
    NeedleError,
    Region,
    TemplateMatcher,
    find,
    wait_for_image,
    wait_for_image_gone,
)

__all__ = [
    "Box",
    "ImageNotFound",
    "ImageStillShown",
    "ImageWaitTimeout",
    "Needle",
    "NeedleError",
    "Region",
    "TemplateMatcher",
    "find",
    "wait_for_image",
    "wait_for_image_gone",
]
