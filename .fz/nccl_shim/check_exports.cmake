# Fails the build, naming them, when libtpar_nccl.so does not export every function listed by
# list_nccl_api.cmake (and its p-prefixed profiling alias).
#   cmake -DNM=nm -DLIBRARY=libtpar_nccl.so -DNAMES=names.txt -P check_exports.cmake
cmake_minimum_required(VERSION 3.24)
execute_process(COMMAND "${NM}" -D --defined-only "${LIBRARY}" OUTPUT_VARIABLE syms
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${syms}")
set(exported "")
foreach(l IN LISTS lines)
  string(REGEX REPLACE "^.*[ \t]" "" s "${l}")
  list(APPEND exported "${s}")
endforeach()
file(STRINGS "${NAMES}" wanted)
set(missing "")
foreach(w IN LISTS wanted)
  string(REGEX REPLACE "^p(nccl)" "\\1" base "${w}")
  foreach(name IN ITEMS "${base}" "p${base}")
    if(NOT name IN_LIST exported AND NOT name IN_LIST missing)
      list(APPEND missing "${name}")
    endif()
  endforeach()
endforeach()
if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "${LIBRARY} does not export these functions of the NCCL headers it was "
                      "built against:\n  ${text}\nAdd a row to nccl_shim/nccl_api.def (or fix "
                      "its gate in nccl_shim/nccl_api_gates.h).")
endif()
