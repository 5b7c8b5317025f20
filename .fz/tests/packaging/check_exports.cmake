# cmake -DLIBRARY=<libtpar.so> -DHEADER=<tpar.h> -DNM=<nm> -P check_exports.cmake
#
# Fails unless the shared library's dynamic symbol table defines exactly the functions that
# tpar.h declares with TPAR_API: nothing internal leaks out (hidden visibility, tpar.map), and
# no declared function was left without the export macro.
foreach(v LIBRARY HEADER NM)
  if(NOT ${v})
    message(FATAL_ERROR "check_exports.cmake: -D${v}= is missing")
  endif()
endforeach()

file(READ "${HEADER}" header)
string(REGEX MATCHALL "TPAR_API[^;(]*[ *](tpar[A-Za-z0-9_]+)\\(" decls "${header}")
set(declared "")
foreach(d ${decls})
  string(REGEX REPLACE ".*[ *](tpar[A-Za-z0-9_]+)\\($" "\\1" name "${d}")
  list(APPEND declared ${name})
endforeach()
list(SORT declared)
list(LENGTH declared ndeclared)
if(ndeclared LESS 10)
  message(FATAL_ERROR "found only ${ndeclared} TPAR_API declarations in ${HEADER}: ${declared}")
endif()

execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY} OUTPUT_VARIABLE nm_out
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${nm_out}")
set(exported "")
foreach(line ${lines})
  # "<address> <type> <name>"; T/W/V/D/B/R/i/u are definitions that other objects can bind to.
  if(line MATCHES "^[0-9a-fA-F]+ [A-Za-z] ([^ ]+)$")
    list(APPEND exported ${CMAKE_MATCH_1})
  endif()
endforeach()
list(SORT exported)

set(extra ${exported})
list(REMOVE_ITEM extra ${declared})
set(missing ${declared})
list(REMOVE_ITEM missing ${exported})
if(extra OR missing)
  list(LENGTH extra nextra)
  if(nextra GREATER 20)
    list(SUBLIST extra 0 20 extra)
    list(APPEND extra "...")
  endif()
  string(REPLACE ";" "\n    " extra "${extra}")
  message(FATAL_ERROR "libtpar.so exports differ from tpar.h\n"
                      "  ${nextra} exported but not declared with TPAR_API:\n    ${extra}\n"
                      "  declared with TPAR_API but not exported: ${missing}")
endif()
message(STATUS "libtpar.so exports the ${ndeclared} functions of tpar.h and nothing else")
