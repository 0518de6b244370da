"""User-facing errors: one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141
F = TypeVar("F", bound=Callable[..., int])


class UserError(Exception):
    """A mistake in what the user gave (a missing file, a bad value, mismatched shapes).

    Raise it anywhere; ``cli_entry`` turns it into ``error: <message>`` and exit code 2.
    """


def cli_entry(prog: str) -> Callable[[F], F]:
    """Decorate ``main(argv) -> int`` so that ``UserError`` (and argparse errors, which already
    exit 2) end with one line on stderr; Ctrl-C exits 130; a closed pipe (``… | head``) ends quietly
    with 141, the status of a process killed by SIGPIPE."""

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
            except BrokenPipeError:
                _silence_stdout()
                return EXIT_BROKEN_PIPE

        return wrapper  # type: ignore[return-value]

    return deco


def _silence_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the interpreter's final flush cannot
    raise a second BrokenPipeError (the recipe of Python's ``signal`` documentation)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (pytest capture): nothing to flush
        pass


def check(cond: object, message: str) -> None:
    """``if not cond: raise UserError(message)``."""
    if not cond:
        raise UserError(message)
