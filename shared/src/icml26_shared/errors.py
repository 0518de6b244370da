"""User-facing errors: one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

EXIT_USAGE = 2
F = TypeVar("F", bound=Callable[..., int])


class UserError(Exception):
    """A mistake in what the user gave (a missing file, a bad value, mismatched shapes).

    Raise it anywhere; ``cli_entry`` turns it into ``error: <message>`` and exit code 2.
    """


def cli_entry(prog: str) -> Callable[[F], F]:
    """Decorate ``main(argv) -> int`` so that ``UserError`` (and argparse errors, which already
    exit 2) end with one line on stderr; Ctrl-C exits 130."""

    def deco(fn: F) -> F:
        @wraps(fn)
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            try:
                return fn(*args, **kwargs)
            except UserError as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return 130

        return wrapper  # type: ignore[return-value]

    return deco


def check(cond: object, message: str) -> None:
    """``if not cond: raise UserError(message)``."""
    if not cond:
        raise UserError(message)
