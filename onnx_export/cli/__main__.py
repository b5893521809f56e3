"""``python -m onnx_export.cli``: the command line (as ``python -m onnx_export``)."""

import sys

from onnx_export.cli import main

sys.exit(main())
