# How tpar registers GoogleTest binaries with CTest (included by tests/CMakeLists.txt and
# nccl_shim/tests/CMakeLists.txt, and by the self-test in tests/selftest, which checks that CTest
# then reports each outcome as it was).
#
# One CTest test per GoogleTest case, found by running the binary with --gtest_list_tests each
# time CTest reads the directory (cmake/gtests_list.cmake). CMake's gtest_discover_tests is not
# used: it gives every case SKIP_REGULAR_EXPRESSION "\[  SKIPPED \]", which CTest lets override
# the exit status, so that a case that failed after printing that marker (or showed a skipped
# child's output) read as "Not Run"; CTest offers no way to take the property off again. Here
# the exit status alone decides (NOTE [skip exit code] in tests/common/test_main.h).

# The exit status of a GoogleTest binary whose case skipped.
set(TPAR_TEST_SKIP_EXIT_CODE 77)

# Registers each GoogleTest case of `target` (an executable linked with tpar_test_main's
# runTests) as a CTest test named like the case (Suite.Test, parameterized names without
# GoogleTest's "# GetParam() = ..." comment), with `label`. Cases named DISABLED_* are
# registered disabled. Further arguments are test properties (name value ...).
function(tpar_add_gtests target label)
  get_property(multi GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(multi)
    message(FATAL_ERROR "tpar_add_gtests: multi-configuration generators are not supported; "
                        "use Ninja or Unix Makefiles")
  endif()
  set(list_script "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gtests_list.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_gtests.cmake")
  string(REPLACE ";" " " properties "${ARGN}")
  file(GENERATE OUTPUT "${include_file}" CONTENT
"set(TPAR_GTEST_EXE [==[$<TARGET_FILE:${target}>]==])
set(TPAR_GTEST_TARGET [==[${target}]==])
set(TPAR_GTEST_LABEL [==[${label}]==])
set(TPAR_GTEST_SKIP_EXIT_CODE ${TPAR_TEST_SKIP_EXIT_CODE})
set(TPAR_GTEST_WORKING_DIRECTORY [==[${CMAKE_CURRENT_BINARY_DIR}]==])
set(TPAR_GTEST_CMAKE [==[${CMAKE_COMMAND}]==])
set(TPAR_GTEST_PROPERTIES [==[${properties}]==])
include([==[${list_script}]==])
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
