"""How every ``rocketmesh`` command and service prints ``--help``.

The formatter adds ``(default: X)`` to an option whose default is a real value,
so a user sees ports, directories and counts without reading the code; an
option left unset (None, False, an empty list) says nothing, since its help
text names what applies instead (an environment variable, the config file).
"""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written (examples stay on their lines) and shows real defaults."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or default is argparse.SUPPRESS or default is None or default is False
                or default == [] or not action.option_strings or "default" in text.lower()):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"

