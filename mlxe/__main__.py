import sys

from mlxe.cli import main

sys.exit(main())
