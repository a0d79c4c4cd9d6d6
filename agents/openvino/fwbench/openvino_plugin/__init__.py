"""fwbench's OpenVINO plugin: inference on OpenVINO's CPU device of the graphs the onnxruntime
plugin builds (its framework-free models.py), and of the user's ONNX files."""
