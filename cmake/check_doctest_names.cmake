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
# ';' is CMake's list separator: name it before the listing becomes a list of lines. (A bracket
# expression cannot hold these characters: CMake's regular expressions take no escapes inside [].)
string(REPLACE ";" "<semicolon>" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(bad "")
foreach(line IN LISTS lines)
  if(line MATCHES "^=+$" OR line MATCHES "^\\[doctest\\]")
    continue()
  endif()
  if(line MATCHES "<semicolon>|\\[|\\]|\\\\")
    string(APPEND bad "\n  ${line}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "doctest case names with filter characters (; [ ] \\; a ';' shown as <semicolon>):${bad}")
endif()
