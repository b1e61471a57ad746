"""vision families."""

from ..extract import Family, Stack, register  # noqa: F401

