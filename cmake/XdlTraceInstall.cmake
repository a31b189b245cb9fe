# `cmake --install` puts headers, the library, its plugins and a package config so others can find_package(xdl_trace).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The shared libxdl_trace (target xdl_trace_shared, exported as xdl_trace::xdl_trace): it
# finds device-tracer plugins in ${CMAKE_INSTALL_LIBDIR}/xdl_trace/plugins beside itself, where
# cpp/plugins installs them, so a moved prefix keeps working. Protobuf stays private to it.
install(TARGETS xdl_trace_shared EXPORT xdl_traceTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/cpp/include/xdl_trace
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/xdl_trace/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/xdl_trace)
install(FILES ${PROJECT_SOURCE_DIR}/proto/xdl_trace.proto
        DESTINATION ${CMAKE_INSTALL_DATADIR}/xdl_trace/proto)
install(EXPORT xdl_traceTargets NAMESPACE xdl_trace::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xdl_trace)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/xdl_traceConfig.cmake.in
        ${PROJECT_BINARY_DIR}/xdl_traceConfig.cmake
        INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xdl_trace)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/xdl_traceConfigVersion.cmake
        COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/xdl_traceConfig.cmake
              ${PROJECT_BINARY_DIR}/xdl_traceConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xdl_trace)
