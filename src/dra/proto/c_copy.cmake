# cmake -DIN=x.proto -DOUT=y.proto -P c_copy.cmake
# The copy of a .proto protoc-c compiles: without `service` blocks (methods are dispatched
# by path) and without proto3 `optional` (protoc-c 1.4 does not generate it). Dropping
# `optional` changes nothing on the wire for a string: the field is sent when not empty,
# and vgpu sets it only then.
file(STRINGS ${IN} lines)
set(out "")
set(skip FALSE)
foreach(line IN LISTS lines)
  if(line MATCHES "^service ")
    set(skip TRUE)
  endif()
  if(NOT skip)
    string(REGEX REPLACE "^([ ]*)optional " "\\1" line "${line}")
    string(APPEND out "${line}\n")
  endif()
  if(skip AND line MATCHES "^}")
    set(skip FALSE)
  endif()
endforeach()
file(WRITE ${OUT} "${out}")
