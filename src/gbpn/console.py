"""The ``gbpn`` command's entry point. It imports the command-line tool (and PyTorch with it, a few
seconds) inside a handler, so that Ctrl-C while they load ends the command with one line and the
usual exit status 130, not a traceback; ``gbpn.cli.main`` handles an interrupt from then on.
``gbpn --version`` answers before any of that loads."""
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:  # answered without loading PyTorch (seconds) for a one-line answer
        from gbpn._version import __version__

        print(f"gbpn {__version__}")
        return 0
    try:
        from gbpn.cli import main as run
    except KeyboardInterrupt:
        print("gbpn: interrupted while loading", file=sys.stderr)
        return 130
    return run(args)
