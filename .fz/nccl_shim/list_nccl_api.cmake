# Lists the functions that INCLUDE_DIR/nccl.h declares (and the host functions of
# INCLUDE_DIR/nccl_device/*.h), one name a line, for the export check and the forwarding test.
#   cmake -DINCLUDE_DIR=/usr/include -DOUT=names.txt -P list_nccl_api.cmake
cmake_minimum_required(VERSION 3.24)
set(HEADER "${INCLUDE_DIR}/nccl.h")
file(GLOB DEVICE_HEADERS "${INCLUDE_DIR}/nccl_device/*.h")
file(READ "${HEADER}" text)
# Comments name functions too ("ncclRedOpCreate***() functions"): drop them first.
string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
string(REGEX REPLACE "//[^\n]*" "" text "${text}")
# A declaration: a type (or a '*'), blanks, the name, '('.
string(REGEX MATCHALL "[A-Za-z0-9_*][ \t\n*]+p?nccl[A-Za-z0-9_]*[ \t\n]*\\(" decls "${text}")
set(names "")
foreach(d IN LISTS decls)
  string(REGEX REPLACE ".*[ \t\n*](p?nccl[A-Za-z0-9_]*)[ \t\n]*\\($" "\\1" name "${d}")
  list(APPEND names "${name}")
endforeach()
foreach(h IN LISTS DEVICE_HEADERS)
  file(READ "${h}" dtext)
  # A header for Windows builds only (it stops with #error elsewhere) declares nothing for Linux.
  if(dtext MATCHES "#if !defined\\(NCCL_OS_WINDOWS\\)[ \t\n]*#error")
    continue()
  endif()
  # Only the host functions the library exports; NCCL_HOST_DEVICE_INLINE ones are inline.
  string(REGEX MATCHALL "NCCL_EXTERN_C[ \t]+__host__[ \t]+[A-Za-z0-9_]+[ \t*]+nccl[A-Za-z0-9_]*[ \t]*\\("
         ddecls "${dtext}")
  foreach(d IN LISTS ddecls)
    string(REGEX REPLACE ".*[ \t*](nccl[A-Za-z0-9_]*)[ \t]*\\($" "\\1" name "${d}")
    list(APPEND names "${name}")
  endforeach()
endforeach()
list(REMOVE_DUPLICATES names)
list(SORT names)
list(LENGTH names n)
if(n LESS 10)
  message(FATAL_ERROR "found only ${n} functions in ${HEADER}: is it nccl.h?")
endif()
list(JOIN names "\n" out)
file(WRITE "${OUT}" "${out}\n")
