"""The web server of `make run`, the image and the compose file: `python -m config.server --port 8000`.

The project's own server (webserver/) serving the project's application (config/asgi.py's stack), made in
each worker after the fork. Options: `python -m config.server --help`.
"""
from __future__ import annotations

import argparse
import sys

from webserver import Application, main


def application(args: argparse.Namespace) -> Application:
    from config.asgi import make_application  # Django is set up here, in the worker, after the fork

    return make_application(threads=args.threads)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], application, prog="python -m config.server"))
