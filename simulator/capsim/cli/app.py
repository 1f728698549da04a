"""The `capsim` command: the Typer app, its commands (one module per group beside this one), and
the entry point that turns a user error into one paragraph on stderr and exit status 2.

No `from __future__ import annotations` in cli/: Typer reads every command's parameters at each
start, and string annotations made it eval about 500 of them (40-50 ms of every `capsim run`).
"""

import gc

import typer
from rich.text import Text

from capsim.cli import calibrate, catalog, plan, planning, plot, reference, run
from capsim.cli.common import err
from capsim.errors import CapsimError, quote

app = typer.Typer(
    name="capsim",
    help="Capacity simulator for LLM serving: how many users can this GPU serve with this model, "
    "at what latency, and what does each token cost?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# In the order `capsim --help` lists them.
for _command in (run.run, reference.tables, catalog.gpus, catalog.models, catalog.schema, planning.compare,
                 planning.sweep, planning.capacity, plan.plan, plot.plot, calibrate.calibrate, reference.validate,
                 catalog.engines):
    app.command()(_command)


def main() -> None:
    """Entry point: user errors print one paragraph and exit 2, never a traceback."""
    try:
        # Not standalone, Typer returns an Exit's code instead of exiting, Ctrl-C included (130).
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        code = 130
    except CapsimError as exc:
        _error(str(exc))
        raise SystemExit(2) from None
    except typer.Abort:
        err.print("aborted")
        raise SystemExit(130) from None
    except OSError as exc:  # e.g. an --out folder that cannot be made or written; a full disk
        if isinstance(exc, BrokenPipeError):  # output piped into a reader that stopped (| head)
            raise SystemExit(1) from None
        where = f"{quote(str(exc.filename), 120).strip(chr(39))}: " if exc.filename else ""
        _error(f"{where}cannot read or write it ({exc.strerror or str(exc)[:120]}); check the path (an --out folder "
               "must be one that can be created and written).")
        raise SystemExit(2) from None
    except SystemExit:
        raise
    except Exception as exc:
        # Usage errors (unknown option, bad value) from Typer's click layer: show its message.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        if type(exc).__name__ == "Exit":
            raise SystemExit(getattr(exc, "exit_code", 0)) from None
        raise
    if code == 130:
        err.print("interrupted")
    if isinstance(code, int) and code:  # the commands themselves return None
        raise SystemExit(code)


def _error(message: str) -> None:
    """A user error as one paragraph on stderr: 'error:' in bold red, the message as written."""
    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)


def console_main() -> None:
    """The `capsim` command and `python -m capsim`: main(), then the process ends. Every object
    still alive is moved to the garbage collector's permanent generation first, so that the
    interpreter's shutdown does not walk them all once more: with numpy, pydantic and a finished
    run loaded that walk took 0.14 to 0.22 s of a 2 s `capsim run`. Nothing is left unwritten:
    output files are closed by then, and the exit flushes stdout and stderr as before."""
    try:
        main()
    finally:
        gc.freeze()
