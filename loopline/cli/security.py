"""``loopline acl``: the Redis ACL users of a tenant's roles (``loopline.acl``)."""

from __future__ import annotations

import argparse
from typing import Any

from loopline import acl
from loopline.cli.common import UsageError, settings


def add_parser(sub: Any) -> None:
    """``loopline acl`` and its arguments, on the command line's subparsers."""
    p = sub.add_parser("acl", help="the Redis ACL users of a tenant's roles (ACL SETUSER lines)")
    p.add_argument("--prefix", help="the tenant's prefix (default: LOOPLINE_PREFIX)")
    p.add_argument(
        "--password-env",
        default=acl.PASSWORD_ENV,
        metavar="TEMPLATE",
        help="variable holding each role's password, {ROLE} the role in capitals "
        f"(default: {acl.PASSWORD_ENV})",
    )
    p.add_argument(
        "--role",
        action="append",
        choices=acl.ROLES,
        help="only this role (repeatable; default: every role)",
    )
    p.add_argument(
        "--aclfile", action="store_true", help="lines of an ACL file instead of ACL SETUSER"
    )
    p.add_argument(
        "--lock-default",
        action="store_true",
        help="also lock Redis's default user (PING only, for health checks); an ACL file "
        "that does not name it leaves it with every right",
    )
    p.add_argument(
        "--new-passwords",
        action="store_true",
        help="print a fresh random password per role as VARIABLE=VALUE lines (an env file "
        "for docker compose) instead of the users",
    )
    p.set_defaults(func=cmd_acl)


def cmd_acl(args: argparse.Namespace) -> int:
    prefix = args.prefix or settings().prefix
    only = tuple(dict.fromkeys(args.role or acl.ROLES))
    if args.new_passwords:
        fresh = acl.new_passwords(only, args.password_env)
        print("\n".join(f"{variable}={value}" for variable, value in fresh.items()))
        return 0
    try:
        acl.check_prefix(prefix)
        passwords = acl.passwords_from_env(only, args.password_env)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except KeyError as exc:
        raise UsageError(f"set the passwords of the roles first: {exc.args[0]}") from None
    lines = (acl.aclfile_lines if args.aclfile else acl.setuser_lines)(prefix, passwords, only)
    if args.lock_default:
        lines.append(acl.locked_default(aclfile=args.aclfile))
    print("\n".join(lines))
    return 0
