"""``python -m gbpn`` runs the command-line tool."""
import sys

from gbpn.cli import main

sys.exit(main())
