"""``python -m gpupool.gateway``: see ``gateway/main.py``."""

import sys

from gpupool.gateway.main import main

sys.exit(main())
