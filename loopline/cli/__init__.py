"""The ``loopline`` command line. Errors a user can cause end in one line saying what to
do; a traceback means a bug in loopline.

- ``parser``: every command's arguments;
- ``agents``: ``deploy``, ``agents`` (the operator's registered agents);
- ``tasks``: ``run``, ``submit``, ``watch``, ``cancel``, ``demo``;
- ``approvals``: ``approvals``, ``decide``;
- ``operations``: ``status``, ``stats``, ``doctor``, ``dlq``, ``schema``, ``asyncapi``;
- ``serving``: ``up``, ``serve``;
- ``security``: ``acl``;
- ``render``: one line per event (tool calls shortened by structure), results, dead
  letters;
- ``live``: a running task as a live view in a terminal, or as plain lines;
- ``tables``: tables drawn in a terminal, aligned text in a pipe;
- ``common``: the one-line user error, settings, reaching Redis.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopline.cli.common import UsageError, fail
from loopline.cli.parser import build_parser
from loopline.cli.render import describe
from services.errors import ConfigurationError

__all__ = ["UsageError", "build_parser", "console", "describe", "fail", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (UsageError, ConfigurationError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        return 130
    return code


def console() -> None:
    """The console script: exit with main's status."""
    raise SystemExit(main())
