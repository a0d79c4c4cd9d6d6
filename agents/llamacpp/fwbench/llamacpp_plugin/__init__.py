"""The llama.cpp plugin of fwbench (entry point "llamacpp": plugin.LlamaCppPlugin), through
llama-cpp-python's low-level bindings: the catalogue's GPT-2 written as a GGUF file of
llama.cpp's "gpt2" architecture (gguf_model.py), run by llama_decode (session.py)."""
