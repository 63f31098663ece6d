"""The scripts' command-line parser, whose mistakes are one line: argparse's own prints its usage first (five lines
and more above the one that matters) and, before Python 3.14, names no near miss for a misspelt flag. Standard
library only, like interrupt.py."""
import argparse
import difflib


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser, but an error is `PROG: error: MESSAGE; did you mean --x? (--help lists them)` alone,
    with exit status 2 as argparse's."""

    def error(self, message):
        if message.startswith("unrecognized arguments: "):
            message += self._near_miss(message.removeprefix("unrecognized arguments: ").split())
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")

    def _near_miss(self, words):
        flags = [flag for action in self._actions for flag in action.option_strings if flag.startswith("--")]
        for word in words:
            close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1) if word.startswith("--") else []
            if close:
                return f"; did you mean {close[0]}?"
        return ""
