# Read by CTest (from the file tpar_add_gtests generates, cmake/gtests.cmake): lists the cases
# of one GoogleTest binary and adds one test per case. Inputs: the TPAR_GTEST_* variables.
if(NOT EXISTS "${TPAR_GTEST_EXE}")
  add_test("${TPAR_GTEST_TARGET}_NOT_BUILT" "${TPAR_GTEST_CMAKE}" -E false)
  return()
endif()
execute_process(COMMAND "${TPAR_GTEST_EXE}" --gtest_list_tests
                WORKING_DIRECTORY "${TPAR_GTEST_WORKING_DIRECTORY}"
                TIMEOUT 60 OUTPUT_VARIABLE listing ERROR_VARIABLE listing_err
                RESULT_VARIABLE listing_rc)
if(NOT listing_rc EQUAL 0)
  # A test that fails, rather than a directory with fewer tests than it should have.
  message(WARNING "${TPAR_GTEST_EXE} --gtest_list_tests failed (${listing_rc}): ${listing_err}")
  add_test("${TPAR_GTEST_TARGET}_LIST_FAILED" "${TPAR_GTEST_CMAKE}" -E false)
  return()
endif()
# The binary must exit with the skip status itself (tpar_test::runTests); one that ignores the
# flag would let every skipped case pass. Asked to run nothing, runTests fails and says so.
execute_process(COMMAND "${TPAR_GTEST_EXE}" "--gtest_filter=-*"
                        "--tpar_skip_exit_code=${TPAR_GTEST_SKIP_EXIT_CODE}"
                WORKING_DIRECTORY "${TPAR_GTEST_WORKING_DIRECTORY}"
                TIMEOUT 60 OUTPUT_VARIABLE probe ERROR_VARIABLE probe RESULT_VARIABLE probe_rc)
if(NOT probe_rc EQUAL 1 OR NOT probe MATCHES "no test case matched")
  message(WARNING "${TPAR_GTEST_EXE} does not end in tpar_test::runTests (tests/common/test_main.h): "
                  "its skipped cases would read as passed")
  add_test("${TPAR_GTEST_TARGET}_IGNORES_SKIP_EXIT_CODE" "${TPAR_GTEST_CMAKE}" -E false)
  return()
endif()
separate_arguments(properties UNIX_COMMAND "${TPAR_GTEST_PROPERTIES}")
# Brackets and semicolons in names would not survive CMake's lists; tpar's cases have none.
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suite "")
foreach(line IN LISTS lines)
  # "Suite." or "Prefix/Suite/0.  # TypeParam = int", then "  Test" or "  Test/1  # GetParam() = 3".
  string(REGEX REPLACE "  #.*$" "" line "${line}")
  if(line MATCHES "^  +([^ ]+)$")
    set(name "${suite}.${CMAKE_MATCH_1}")
    add_test("${name}" "${TPAR_GTEST_EXE}" "--gtest_filter=${name}" "--gtest_also_run_disabled_tests"
             "--tpar_skip_exit_code=${TPAR_GTEST_SKIP_EXIT_CODE}")
    set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE ${TPAR_GTEST_SKIP_EXIT_CODE}
                         LABELS "${TPAR_GTEST_LABEL}"
                         WORKING_DIRECTORY "${TPAR_GTEST_WORKING_DIRECTORY}" ${properties})
    if(name MATCHES "(^|\\.)DISABLED_")
      set_tests_properties("${name}" PROPERTIES DISABLED TRUE)
    endif()
  elseif(line MATCHES "^([^ ]+)\\.$")
    set(suite "${CMAKE_MATCH_1}")
  endif()
endforeach()
