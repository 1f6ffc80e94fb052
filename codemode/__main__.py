"""``python -m codemode`` runs the command line."""

import sys

from codemode.cli import main

sys.exit(main())
