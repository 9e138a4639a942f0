# Warnings are errors; the set is libnvidia-container's plus -Wconversion (docs/style.md §8).
set(VGPU_WARNINGS
  -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wformat=2 -Wformat-security -Wconversion -Wsign-conversion -Wpointer-arith
  -Wcast-qual -Wwrite-strings -Wundef -Wvla -Wnull-dereference -Wdouble-promotion
  -Wimplicit-fallthrough -Wmissing-declarations -Wold-style-definition)
set(VGPU_HARDENING -fstack-protector-strong -fno-strict-aliasing)
if(NOT VGPU_SANITIZE STREQUAL "address")
  list(APPEND VGPU_HARDENING -D_FORTIFY_SOURCE=2)
endif()
add_compile_options(${VGPU_WARNINGS} ${VGPU_HARDENING})
add_link_options(-Wl,-z,relro -Wl,-z,now -Wl,--as-needed)

set(VGPU_SAN_FULL "")
set(VGPU_SAN_PRELOAD "")
if(VGPU_SANITIZE STREQUAL "address")
  # Everything gets ASan+UBSan except what is loaded with LD_PRELOAD into foreign
  # programs: ASan must be first in the link order there, so those get UBSan alone.
  set(VGPU_SAN_FULL -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  set(VGPU_SAN_PRELOAD -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
elseif(NOT VGPU_SANITIZE STREQUAL "none")
  message(FATAL_ERROR "VGPU_SANITIZE must be none or address, not '${VGPU_SANITIZE}'")
endif()
