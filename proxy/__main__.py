"""`python -m proxy` is `recap-proxy`."""

import sys

from proxy.cli import main

sys.exit(main())
