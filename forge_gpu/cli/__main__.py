import sys

from forge_gpu.cli import main

sys.exit(main())
