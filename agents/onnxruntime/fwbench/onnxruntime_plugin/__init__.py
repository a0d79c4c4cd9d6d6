"""fwbench's ONNX Runtime plugin: inference of graphs it builds itself (models.py) from the
shared architecture tables, in PyTorch's layouts; `fwbench-onnx-export` writes them out."""
