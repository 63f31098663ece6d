"""The scripts' command-line parser, whose mistakes are one line: argparse's own prints its usage first (five lines
and more above the one that matters) and, before Python 3.14, names no near miss for a misspelt flag. Standard
library only, like interrupt.py."""
import argparse
import difflib


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser, but an error is one line alone, with exit status 2 as argparse's:
    `PROG: error: MESSAGE; did you mean --x? (--help lists the options)`."""

    def error(self, message):
        if message.startswith("unrecognized arguments: "):
            message += self._near_miss(message.removeprefix("unrecognized arguments: ").split())
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")

    def _near_miss(self, words):
        for word in words:
            if word.startswith("--") and (near := near_option(word, self)):
                return f"; did you mean {near}?"
        return ""


def near_option(word, parser):
    """parser's --option nearest word (--simulat=1: --simulate), or None."""
    options = [option for option in parser._option_string_actions if option.startswith("--")]
    close = difflib.get_close_matches(word.partition("=")[0], options, n=1)
    return close[0] if close else None


def below_least(args, least):
    """The first flag of least ({name: its least value}) whose value in args is below it (or nan), as one line such
    as `--limit must be at least 1, got 0`, else None. A flag left unset (None) is not checked."""
    for name, low in least.items():
        value = getattr(args, name)
        if value is not None and not value >= low:
            return f"--{name} must be at least {low}, got {value:g}"
    return None
