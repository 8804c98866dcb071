"""``python -m gbpn.cli`` runs the command-line tool."""
import sys

from gbpn.cli import main

sys.exit(main())
