"""Tools shipped with xdl_trace; read_trace.py also runs stand-alone (numpy + protobuf only)."""
