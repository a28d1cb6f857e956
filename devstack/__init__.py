"""The development entry point: `make run` and `make test` from a fresh clone, nothing but Python needed
(`python -m devstack run|test`; devstack/cli.py tells what each does and which variables it reads).

    commands.py    the process commands (web, worker, beat) and how a command runs from this environment
    output.py      tagged, coloured output; the errors that end a run
    supervisor.py  the children: started in their own sessions, output pumped, stopped in order
    embedded.py    embedded PostgreSQL and Valkey, and the port checks
    stack.py       a mode's data folder, lock and servers
    cli.py         `run` and `test`

The names below are the package's face: the tests' servers (tests/conftest.py, tests/faults/), the compose test
and bench/ start the same processes and embedded servers as `make run` through them.
"""

from .cli import main
from .commands import STATIC_ROOT, beat_command, resolve, web_command, worker_command
from .embedded import EmbeddedPostgres, EmbeddedValkey

__all__ = ["STATIC_ROOT", "EmbeddedPostgres", "EmbeddedValkey", "beat_command", "main", "resolve", "web_command",
           "worker_command"]
