"""Random draws in the model function where capture stopped on a data-dependent value.

Some models sample in eval mode: ViLT's image embedding keeps a random subset (a random
order when all fit) of the image patches with ``torch.multinomial``, a few lines after the
data-dependent sizes that stop torch.export. Rewriting those sizes would not make the
export match eager: eager itself gives other outputs at each call (the patch rows of
ViLT's ``last_hidden_state`` come in another order), and ONNX Runtime's generator is not
torch's. :func:`random_draw_near` finds such a draw in the function that holds the
failing line, so that the capture error can say so.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re

__all__ = ["random_draw_near"]

_DRAWS = re.compile(
    r"\btorch\.(multinomial|rand|randn|randint|randperm|bernoulli|normal|poisson)\(|"
    r"\.(multinomial|bernoulli_|uniform_|normal_|exponential_)\("
)


@functools.lru_cache(maxsize=64)
def _functions(path: str) -> tuple[tuple[int, int], ...]:
    """The line ranges of the functions defined in ``path`` (innermost last)."""
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def random_draw_near(path: str, line: int) -> tuple[int, str] | None:
    """The first random draw (line, code) in the innermost function of ``path`` holding ``line``.

    Example:
        >>> random_draw_near("/no/such/file.py", 3) is None
        True
    """
    spans = [(start, end) for start, end in _functions(path) if start <= line <= end]
    if not spans:
        return None
    start, end = min(spans, key=lambda span: span[1] - span[0])
    for number in range(start, end + 1):
        code = linecache.getline(path, number).strip()
        if not code.startswith("#") and _DRAWS.search(code):
            return number, code
    return None
