"""protoc-generated message classes of proto/*.proto (xdl_trace_pb2, device_trace_pb2), built by CMake.

The modules are generated at build time (bindings/CMakeLists.txt), never written by hand:
the .proto files are the one schema. xdl_trace/tools/read_trace.py is the stand-alone
exception and does not import them.
"""
