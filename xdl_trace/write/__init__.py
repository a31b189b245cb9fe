"""The write wing: what a training script calls (registration, the hook, watch, filters) and the
capture of device tensors; it hands memory to the C++ core and never reads a trace back (the layer
check, scripts/check_python_layers.py, holds it apart from the read wing)."""
