"""The ``lmstudy krony`` commands: ``krony table`` prints the paper's parameter Tables 1 and 2."""

from __future__ import annotations


def register(subparsers) -> None:
    """Add ``krony table`` to the ``lmstudy`` command line."""
    krony = subparsers.add_parser("krony", help="Krony-PT (Kronecker-factored GPT-2 MLPs) tools")
    krony_commands = krony.add_subparsers(dest="krony_command", required=True, metavar="SUBCOMMAND")
    table = krony_commands.add_parser(
        "table", help="the paper's parameter Tables 1 and 2, recomputed from the GPT-2 small config",
        description="Every row of Krony-PT Table 1 and the multi-factor rows of Table 2, beside the paper's numbers.",
    )
    table.set_defaults(handler=print_table)


def print_table(args) -> int:
    """``lmstudy krony table``."""
    # Imported here: the Kronecker code needs torch and transformers, which `--help` should not wait for.
    from lmstudy.krony.table import format_table

    print(format_table())
    return 0
