# Fails when a source file includes a layer it may not (the rules of cpp/include/README.md).
#
#   cmake -DROOT=<a tree with cpp/src, cpp/include, cpp/plugins> -P CheckIncludeLayers.cmake
#
# Reads every #include "..." line of cpp/src/<layer>/*, cpp/plugins/**,
# cpp/include/xdl_trace/** and bindings/* and checks it against the table below.

cmake_minimum_required(VERSION 3.18)

if(NOT ROOT)
  message(FATAL_ERROR "CheckIncludeLayers: pass -DROOT=<source tree>")
endif()

# The layers of cpp/src, in data-flow order, and what each may include
# (besides public xdl_trace/ headers, absl, generated .pb.h and the standard
# library). Arrows point down the pipeline: core <- registry/summary <- record
# <- io <- tracer; reader and plugin stand beside it; analysis reads through reader
# and summarizes with summary; nothing includes upward.
set(layers core registry summary record io tracer reader plugin analysis)
set(allowed_core core)
set(allowed_registry core registry)
set(allowed_summary core summary)
set(allowed_record core registry summary record)
set(allowed_io core registry summary record io)
set(allowed_tracer core registry summary record io tracer plugin)
set(allowed_reader core reader)
set(allowed_plugin core record plugin)
set(allowed_analysis core summary reader analysis)
# Single headers one layer may use from a layer it otherwise may not.
set(allowed_reader_headers "")
# Public headers that are one layer's face: only that layer and those above it may include
# them (the tracer's public class is not a lower layer's constant store).
set(public_header_layer_xdl_trace/tracer.h tracer)

# The parts of the public reader API (cpp/include/xdl_trace/reader/, one header per concept) and
# the xdl_trace/ headers each may include besides std and absl: a part includes only the parts
# below it, so the record views never pull in the reader. A header there without a row is
# reported (a new part says here what it may include).
set(reader_parts errors file_meta file_names options record_view runs stack trace_cursor
    trace_file trace_reader)
set(public_allowed_errors "")
set(public_allowed_file_meta "")
set(public_allowed_file_names "")
set(public_allowed_options "")
set(public_allowed_runs "")
set(public_allowed_record_view xdl_trace/dtype.h xdl_trace/tensor.h)
set(public_allowed_trace_cursor xdl_trace/reader/errors.h xdl_trace/reader/record_view.h)
set(public_allowed_trace_file xdl_trace/reader/errors.h xdl_trace/reader/file_meta.h
    xdl_trace/reader/options.h xdl_trace/reader/record_view.h)
set(public_allowed_stack xdl_trace/dtype.h xdl_trace/tensor.h xdl_trace/reader/errors.h
    xdl_trace/reader/trace_file.h)
set(public_allowed_trace_reader xdl_trace/dtype.h xdl_trace/tensor.h)
foreach(part IN LISTS reader_parts)
  if(NOT part STREQUAL "trace_reader")
    list(APPEND public_allowed_trace_reader xdl_trace/reader/${part}.h)
  endif()
endforeach()

# Headers with no dependency beyond the C++ standard library (and POSIX): with
# the header-only ones below, the only cpp/src headers a device-tracer plugin
# (a separate shared library) may include.
set(std_only_headers core/wire.h core/clock.h core/device_trace_fields.h core/thread_priority.h)
# Header-only headers that link nothing: std, std-only headers and abseil's
# lock annotation macros (the annotated mutex wrapper).
set(header_only_headers core/mutex.h)
set(header_only_allowed absl/base/thread_annotations.h)

set(violations "")

# Appends the quoted includes of `file` to the variable named `out`.
function(quoted_includes file out)
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  set(result "")
  foreach(line IN LISTS lines)
    if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      list(APPEND result "${CMAKE_MATCH_1}")
    elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
      list(APPEND result "<${CMAKE_MATCH_1}>")
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

macro(violation file include why)
  file(RELATIVE_PATH rel "${ROOT}" "${file}")
  list(APPEND violations "${rel}: #include \"${include}\": ${why}")
endmacro()

# cpp/src/<layer>/*: includes of other layers only as the table allows.
foreach(layer IN LISTS layers)
  file(GLOB_RECURSE sources "${ROOT}/cpp/src/${layer}/*.h" "${ROOT}/cpp/src/${layer}/*.cc")
  foreach(file IN LISTS sources)
    quoted_includes("${file}" includes)
    foreach(include IN LISTS includes)
      if(include STREQUAL "core/device_trace_fields.h")
        violation("${file}" "${include}" "the core takes field numbers from the generated code; the hand-written table is for plugins")
      elseif(DEFINED public_header_layer_${include}
             AND NOT public_header_layer_${include} IN_LIST allowed_${layer})
        violation("${file}" "${include}" "${include} is the ${public_header_layer_${include}} layer's public header, and ${layer}/ is below it")
      elseif(include MATCHES "^([a-z_]+)/" AND CMAKE_MATCH_1 IN_LIST layers)
        set(target "${CMAKE_MATCH_1}")
        if(NOT target IN_LIST allowed_${layer} AND NOT include IN_LIST allowed_${layer}_headers)
          list(JOIN allowed_${layer} ", " may)
          violation("${file}" "${include}" "${layer}/ may include only ${may}")
        endif()
      endif()
    endforeach()
  endforeach()
  # The std-only headers stay std-only.
  foreach(header IN LISTS std_only_headers)
    if(NOT EXISTS "${ROOT}/cpp/src/${header}")
      continue()
    endif()
    quoted_includes("${ROOT}/cpp/src/${header}" includes)
    foreach(include IN LISTS includes)
      if(NOT include MATCHES "^<" AND NOT include IN_LIST std_only_headers)
        violation("${ROOT}/cpp/src/${header}" "${include}" "a std-only header includes only std and other std-only headers")
      endif()
    endforeach()
  endforeach()
  foreach(header IN LISTS header_only_headers)
    if(NOT EXISTS "${ROOT}/cpp/src/${header}")
      continue()
    endif()
    quoted_includes("${ROOT}/cpp/src/${header}" includes)
    foreach(include IN LISTS includes)
      if(NOT include MATCHES "^<" AND NOT include IN_LIST std_only_headers
         AND NOT include IN_LIST header_only_allowed)
        violation("${ROOT}/cpp/src/${header}" "${include}" "a header-only header a plugin may use includes only std, std-only headers and ${header_only_allowed}")
      endif()
    endforeach()
  endforeach()
endforeach()

# cpp/plugins/**: the plugin ABI, std-only and header-only core headers, their own files.
file(GLOB_RECURSE plugin_sources "${ROOT}/cpp/plugins/*.h" "${ROOT}/cpp/plugins/*.cc")
foreach(file IN LISTS plugin_sources)
  quoted_includes("${file}" includes)
  foreach(include IN LISTS includes)
    if(include MATCHES "\\.pb\\.h>?$")
      violation("${file}" "${include}" "a plugin must not link the generated protobuf code (cpp/include/README.md)")
    elseif(include MATCHES "^([a-z_]+)/" AND CMAKE_MATCH_1 IN_LIST layers
           AND NOT include IN_LIST std_only_headers AND NOT include IN_LIST header_only_headers)
      list(JOIN std_only_headers ", " may)
      string(APPEND may ", ${header_only_headers}")
      violation("${file}" "${include}" "a plugin may include only ${may} from cpp/src")
    elseif(include MATCHES "^xdl_trace/" AND NOT include MATCHES "^xdl_trace/plugin/")
      violation("${file}" "${include}" "a plugin sees only the C ABI of xdl_trace/plugin/")
    endif()
  endforeach()
endforeach()

# bindings/: shims over any layer of the core (public or internal headers,
# generated code), never a plugin's files, CUDA headers or the plugins' field table.
file(GLOB binding_sources "${ROOT}/bindings/*.h" "${ROOT}/bindings/*.cc")
foreach(file IN LISTS binding_sources)
  quoted_includes("${file}" includes)
  foreach(include IN LISTS includes)
    if(include MATCHES "cupti" OR include MATCHES "^<?cuda")
      violation("${file}" "${include}" "the binding never includes CUDA headers (fences find CUDA at run time)")
    elseif(include MATCHES "^(cupti|plugins)/")
      violation("${file}" "${include}" "the binding never includes a plugin's files")
    elseif(include STREQUAL "core/device_trace_fields.h")
      violation("${file}" "${include}" "the binding takes field numbers from the generated code")
    endif()
  endforeach()
endforeach()

# cpp/include/xdl_trace: std + absl only, never internal or generated headers;
# the plugin ABI (xdl_trace/plugin/) is pure C: stddef.h and stdint.h.
file(GLOB_RECURSE public_headers "${ROOT}/cpp/include/xdl_trace/*.h")
foreach(file IN LISTS public_headers)
  quoted_includes("${file}" includes)
  foreach(include IN LISTS includes)
    if(file MATCHES "/xdl_trace/plugin/")
      if(NOT include MATCHES "^<(stddef|stdint)\\.h>$")
        violation("${file}" "${include}" "the plugin ABI header includes only <stddef.h> and <stdint.h>")
      endif()
    elseif(include MATCHES "\\.pb\\.h>?$" OR include MATCHES "cupti")
      violation("${file}" "${include}" "public headers never include generated or CUDA headers")
    elseif(NOT include MATCHES "^<" AND NOT include MATCHES "^(xdl_trace|absl)/")
      violation("${file}" "${include}" "public headers include only std, absl and xdl_trace/")
    elseif(include MATCHES "^xdl_trace/" AND file MATCHES "/xdl_trace/reader/([^/]+)\\.h$")
      set(part "${CMAKE_MATCH_1}")  # The last MATCHES sets it.
      if(NOT part IN_LIST reader_parts)
        violation("${file}" "${include}" "a reader part not in CheckIncludeLayers.cmake's reader_parts: add its row")
      elseif(NOT include IN_LIST public_allowed_${part})
        list(JOIN public_allowed_${part} ", " may)
        if(may STREQUAL "")
          set(may "no xdl_trace/ header")
        endif()
        violation("${file}" "${include}" "the reader part ${part}.h may include ${may}")
      endif()
    endif()
  endforeach()
endforeach()

if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "include rules broken (cpp/include/README.md):\n  ${text}")
endif()
message(STATUS "include layers ok under ${ROOT}")
