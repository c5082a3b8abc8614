# Passes when DIR holds at least one case file (*.json) whose text matches MATCH.
#   cmake -DDIR=corpus -DMATCH=regex -P expect_corpus.cmake
file(GLOB files ${DIR}/*.json)
foreach(f ${files})
  file(READ ${f} text)
  if(text MATCHES "${MATCH}")
    message("found ${f}")
    return()
  endif()
endforeach()
message(FATAL_ERROR "no case file in ${DIR} matches '${MATCH}' (files: ${files})")
