"""Embedders: text to unit vectors, offline or through an Ollama server.

One interface (``embedder``: embed, model_id, dim, and the factory), the
default MiniLM int8 ONNX network (``minilm``), the light WordLlama option
(``wordllama``) and Ollama's ``/api/embed`` (``ollama``).
"""
