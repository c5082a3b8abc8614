# Driver of the install_plugin_out_of_tree test (see CMakeLists.txt).
#   cmake -DBUILD_DIR=... -DPLUGIN_PROJECT=... -DWORK=... -DGENERATOR=... -DCXX=... -DVERSION=... -P plugin_out_of_tree.cmake
set(prefix ${WORK}/prefix)
set(attncheck ${prefix}/bin/attncheck)

# run(NAME EXPECT rc [MATCH regex] [ENV VAR=value...] COMMAND ...): runs a command, checks its exit
# status and, optionally, that its output matches; the output is kept for the next check.
function(run name)
  cmake_parse_arguments(R "" "EXPECT;MATCH" "ENV;COMMAND" ${ARGN})
  if(R_ENV)
    set(R_COMMAND ${CMAKE_COMMAND} -E env ${R_ENV} ${R_COMMAND})
  endif()
  execute_process(COMMAND ${R_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("---- ${name}: exit ${rc}\n${out}")
  if(NOT rc STREQUAL R_EXPECT)
    message(FATAL_ERROR "${name}: expected exit ${R_EXPECT}, got ${rc}")
  endif()
  if(DEFINED R_MATCH AND NOT out MATCHES "${R_MATCH}")
    message(FATAL_ERROR "${name}: output does not match '${R_MATCH}'")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/empty-path)

run(install EXPECT 0 COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f bin/attncheck bin/attncheck-isolate include/attncheck/plugin_abi.h share/attncheck/plot_report.py
          lib/cmake/attncheck/attncheckConfig.cmake lib/cmake/attncheck/attncheckConfigVersion.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${prefix}/${f}")
  endif()
endforeach()

# The plugin project finds the package in the prefix, nowhere else.
run(configure EXPECT 0 MATCH "attncheck ${VERSION} from ${prefix}/lib/cmake/attncheck"
    COMMAND ${CMAKE_COMMAND} -S ${PLUGIN_PROJECT} -B ${WORK}/build -G ${GENERATOR}
            -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
            -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
run(build EXPECT 0 COMMAND ${CMAKE_COMMAND} --build ${WORK}/build)
# Its own tests run the installed CLI through the imported target attncheck::attncheck.
run(plugin_ctest EXPECT 0 COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK}/build --output-on-failure)

file(GLOB plugin ${WORK}/build/*tiny_merge*)
run(version EXPECT 0 MATCH "^attncheck ${VERSION}[ \n]" COMMAND ${attncheck} --version)
run(list EXPECT 0 MATCH "tiny-merge" COMMAND ${attncheck} list --plugin ${plugin})
run(check EXPECT 0 COMMAND ${attncheck} check --plugin ${plugin} --backend host --cases 5 --no-plots
                           --report-dir ${WORK}/report)
# The installed CLI finds its isolation worker next to itself.
run(isolate EXPECT 0 MATCH "pass" COMMAND ${attncheck} check --plugin ${plugin} --isolate --backend host --cases 5
                                     --no-plots --report-dir ${WORK}/report-isolated)
file(READ ${WORK}/report/report.json report)
string(JSON tool_version GET "${report}" tool_version)
if(NOT tool_version STREQUAL VERSION)
  message(FATAL_ERROR "report.json tool_version '${tool_version}', expected '${VERSION}'")
endif()

# `attncheck plot` runs the installed script with the python3 it finds on PATH. A stand-in
# python3 that prints its arguments shows which script; one that exits as the script does
# without matplotlib, and an empty PATH, show the one-line hint.
file(MAKE_DIRECTORY ${WORK}/fake-python ${WORK}/no-matplotlib)
file(WRITE ${WORK}/fake-python/python3 "#!/bin/sh\necho \"python3 $*\"\n")
file(WRITE ${WORK}/no-matplotlib/python3 "#!/bin/sh\nexit 3\n")
file(CHMOD ${WORK}/fake-python/python3 ${WORK}/no-matplotlib/python3 PERMISSIONS OWNER_READ OWNER_EXECUTE)
run(plot_installed_script EXPECT 0 MATCH "python3 ${prefix}/share/attncheck/plot_report.py ${WORK}/report/report.json --out ${WORK}/report/plots"
    ENV PATH=${WORK}/fake-python ATTNCHECK_PLOT_SCRIPT= COMMAND ${attncheck} plot ${WORK}/report)
run(plot_no_matplotlib EXPECT 2 MATCH "no python3 on PATH has matplotlib.*apt-get install python3-matplotlib, then attncheck plot"
    ENV PATH=${WORK}/no-matplotlib ATTNCHECK_PLOT_SCRIPT= COMMAND ${attncheck} plot ${WORK}/report)
run(plot_no_python EXPECT 2 MATCH "no python3 on PATH"
    ENV PATH=${WORK}/empty-path ATTNCHECK_PLOT_SCRIPT= COMMAND ${attncheck} plot ${WORK}/report)
file(TOUCH ${WORK}/my_plot.py)
run(plot_env_script EXPECT 0 MATCH "python3 ${WORK}/my_plot.py "
    ENV PATH=${WORK}/fake-python ATTNCHECK_PLOT_SCRIPT=${WORK}/my_plot.py COMMAND ${attncheck} plot ${WORK}/report)
