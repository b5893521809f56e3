"""``python -m onnx_export.diagnostics REPORT.sarif``: print a summary of a SARIF report.

Exit status: 1 if the report has error-level results, 0 if not, 2 if it cannot be read.

Example:
    ``python -m onnx_export.diagnostics onnx_export_report.sarif``
"""

from __future__ import annotations

import sys

from ._summary import main

if __name__ == "__main__":
    sys.exit(main())
