"""`python -m proxy` is `recap-proxy`."""

import sys

from proxy.cli.main import main

sys.exit(main())
