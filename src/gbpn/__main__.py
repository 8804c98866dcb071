"""``python -m gbpn`` runs the command-line tool."""
import sys

from gbpn.console import main

sys.exit(main())
