import sys

from kquota.cli import main

sys.exit(main())
