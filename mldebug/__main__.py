import sys

from mldebug.cli import main

sys.exit(main())
