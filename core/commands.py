"""The base of the project's management commands: their help in the operator's language (docs/glossary.md).

A command's `help` is marked with gettext_lazy (a class attribute), its arguments' help and what it prints for
operators with gettext (read when it runs); tests/test_i18n.py checks every command's help is translated.
Management commands run in settings.LANGUAGE_CODE (DJANGO_LANGUAGE_CODE, default en): Django 5.2's
BaseCommand leaves the language alone (only @no_translations turns it off). What machines read (JSON lines,
CSV headers) stays as the contract says. argparse wants a str for the description: a lazy text is made one.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.i18n import StrOrPromise


class OperatorCommand(BaseCommand):
    help: StrOrPromise = ""  # type: ignore[assignment]  # gettext_lazy, made a str for argparse below

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.description = str(self.help) if self.help else None
        return parser
