# -DXDL_TRACE_SANITIZE=address|undefined|thread (or a list such as "address,undefined") applies
# the sanitizers to every target; UBSan findings abort (no recovery) so they fail the test run.
# -DXDL_TRACE_FUZZ=ON (clang only) also instruments for libFuzzer and builds tests/fuzz's fuzzers.
if(XDL_TRACE_SANITIZE)
  add_compile_options(-fsanitize=${XDL_TRACE_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${XDL_TRACE_SANITIZE})
  if(XDL_TRACE_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=all)
    add_link_options(-fno-sanitize-recover=all)
  endif()
endif()
if(XDL_TRACE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "XDL_TRACE_FUZZ needs clang (libFuzzer): configure with CXX=clang++-14")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
