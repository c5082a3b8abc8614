# What `cmake --install` puts under the prefix, and the CMake package that find_package(attncheck)
# reads there:
#   bin/attncheck                               the CLI (attncheck::attncheck, imported executable)
#   bin/attncheck-isolate                       the worker `--isolate` hosts a plugin in (found
#                                               next to bin/attncheck)
#   include/attncheck/plugin_abi.h              the plugin ABI (attncheck::abi, INTERFACE target)
#   share/attncheck/plot_report.py              pictures of a report (`attncheck plot` finds it
#                                               relative to bin/attncheck)
#   lib/cmake/attncheck/attncheckConfig.cmake   the package, its version file and targets
# Only the ABI header is public: plugins need nothing else of attncheck.
include(CMakePackageConfigHelpers)

set(ATTNCHECK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attncheck)

install(TARGETS attncheck attncheck_abi EXPORT attncheckTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS attncheck-isolate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/abi/include/attncheck/plugin_abi.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attncheck)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/harness/plots/plot_report.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/attncheck)
install(EXPORT attncheckTargets NAMESPACE attncheck:: DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attncheckConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attncheckConfig.cmake
                              INSTALL_DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})
# 0.x: a minor release may change what a plugin sees. Whether a built plugin still loads is the
# separate question AC_ABI_VERSION answers at load time.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attncheckConfig.cmake ${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
        DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})
