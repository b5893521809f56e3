"""Translation: an ``ExportedProgram``'s FX graph, node by node, to an ``onnx_ir`` model.

- ``_stage``: the stage as the pipeline calls it (check, name, translate);
- ``_translate``: the walk over FX nodes;
- ``_dispatch``: which ONNX function (the user's, ours, torchlib's) a node gets, and why;
- ``_operands``, ``_symbolic``: operands ONNX functions cannot take as they come, and
  SymInt/SymFloat/SymBool arithmetic;
- ``_control_flow``: ``torch.cond``, ``while_loop``, ``scan``, ``map`` as ONNX ``If``,
  ``Loop``, ``Scan``;
- ``_builder``, ``_recorder``: the graph builder that tags each node with its FX origin,
  and the onnxscript evaluator that records into it;
- ``_source``: where an FX node came from in the user's code;
- ``_naming``, ``_graph_io``: graph inputs and outputs named after ``forward``, put in the
  adapter's order, renamed as the user asked.

This stage may import capture's results, never a later stage.
"""

__all__: list[str] = []  # the stage is private: its modules are `_module.py` files
