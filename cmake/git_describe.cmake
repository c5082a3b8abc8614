# Writes OUT, a C++ file defining attncheck::cli::kGitDescribe as the source tree's git describe
# (empty outside a checkout). Run at every build (harness/CMakeLists.txt), not at configure time,
# so that a build after a commit or an edit carries it; the file is rewritten only when the text
# changes, so that an unchanged tree relinks nothing.
#   cmake -DGIT_EXECUTABLE=... -DSOURCE_DIR=... -DOUT=... -P git_describe.cmake
set(describe "")
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --tags
                  WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE describe
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
string(CONCAT text "// Written by cmake/git_describe.cmake at build time: the tree's git describe.\n"
         "namespace attncheck::cli {\n"
         "extern const char* const kGitDescribe;\n"
         "const char* const kGitDescribe = \"${describe}\";\n"
         "}  // namespace attncheck::cli\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
