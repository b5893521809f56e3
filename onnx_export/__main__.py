"""``python -m onnx_export``: the command line."""

import sys

from onnx_export.cli import main

sys.exit(main())
