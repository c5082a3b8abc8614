# Runs one attncheck command and checks its exit status exactly (WILL_FAIL only knows zero vs
# non-zero), that an error is one line naming the problem, and optional regexes on the output.
#   cmake -DCMD="a|b|c" -DEXPECT=2 [-DMATCH=regex] [-DONE_LINE_ERROR=1] -P expect_exit.cmake
string(REPLACE "|" ";" CMD "${CMD}")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\nstdout:\n${out}\nstderr:\n${err}")
if(NOT rc STREQUAL EXPECT)
  message(FATAL_ERROR "expected exit ${EXPECT}, got ${rc}")
endif()
if(DEFINED MATCH AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "output does not match '${MATCH}'")
endif()
if(ONE_LINE_ERROR)
  string(STRIP "${err}" e)
  string(FIND "${e}" "\n" nl)
  if(e STREQUAL "" OR NOT nl EQUAL -1)
    message(FATAL_ERROR "expected exactly one line on stderr")
  endif()
endif()
