# Makes protoc's Python output importable as a package: `import device_trace_pb2 as x` -> `from . import ...`.
# Run as: cmake -DIN=<generated _pb2.py> -DOUT=<package _pb2.py> -P XdlTraceFixPythonImports.cmake
file(READ ${IN} text)
string(REGEX REPLACE "(^|\n)import ([A-Za-z0-9_]+_pb2) as " "\\1from . import \\2 as " text "${text}")
file(WRITE ${OUT} "${text}")
