"""Engine styles: the software behaviour of vLLM, SGLang and TensorRT-LLM, as data."""
