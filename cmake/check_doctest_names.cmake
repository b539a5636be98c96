# Fails when a doctest case name would be split or globbed by the filters ctest passes
# (';' splits a CMake list during ctest discovery; '[' ']' change CMake's list splitting; '\'
# escapes doctest's filter): such a case would match nothing, and doctest exits 0 on an empty
# selection, so it would pass untested. Commas are safe: doctest.cmake escapes them.
# Usage: cmake -DBINARY=path -P check_doctest_names.cmake
execute_process(COMMAND ${BINARY} --list-test-cases --no-version
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BINARY} --list-test-cases exited ${rc}")
endif()
string(REGEX MATCHALL "[^\n]*[;\\[\\]\\\\][^\n]*" bad "${listing}")
list(FILTER bad EXCLUDE REGEX "^=+$|^\\[doctest\\]")
if(bad)
  message(FATAL_ERROR "doctest case names with filter characters (; [ ] \\): ${bad}")
endif()
