# -DXDL_TRACE_SANITIZE=address|undefined|thread applies a sanitizer to every target.
if(XDL_TRACE_SANITIZE)
  add_compile_options(-fsanitize=${XDL_TRACE_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${XDL_TRACE_SANITIZE})
endif()
