"""Every command and every option of unreachable-cli and unreachabled says what it does."""

from __future__ import annotations

import argparse

from unreachable.cli.main import build_parser as cli_parser
from unreachable.daemon.main import build_parser as daemon_parser


def _parsers(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def _undocumented(parser: argparse.ArgumentParser, name: str) -> list[str]:
    missing = []
    if " " in name and not parser.description:
        missing.append(f"{name}: no description for --help")
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:  # internal, hidden on purpose
            continue
        if not action.help:
            label = "/".join(action.option_strings) or action.dest
            missing.append(f"{name} {label}: no help text")
    return missing


def test_every_option_of_every_command_has_help_text():
    missing = []
    for root, prog in ((cli_parser(), "unreachable-cli"), (daemon_parser(), "unreachabled")):
        for name, parser in _parsers(root, prog):
            missing += _undocumented(parser, name)
    assert missing == []
