# dispatch: a library between the program and libcuda finds the driver's entry points
# itself (dlsym/dlvsym with RTLD_NEXT, RTLD_DEFAULT, a handle, glibc's own dlsym, a copy of
# the driver by path, dlmopen); docs/security.md, "Symbols however they are found".
if(TARGET fakegpu_cuda AND TARGET fakegpu_nvml AND TARGET vgpu_libvgpu)
  add_library(dispatch_attack_lib SHARED ${CMAKE_CURRENT_LIST_DIR}/dispatch_lib.c)
  target_include_directories(dispatch_attack_lib PRIVATE ${PROJECT_SOURCE_DIR}/src)
  # No sibling calls: a lookup's caller must be this library, not whoever called it.
  target_compile_options(dispatch_attack_lib PRIVATE ${VGPU_SAN_FULL} -fno-optimize-sibling-calls)
  # The driver comes after the library in the search order, as its own dependency (kept
  # although the library only reaches it by lookups).
  target_link_options(dispatch_attack_lib PRIVATE ${VGPU_SAN_FULL} -Wl,--no-as-needed)
  target_link_libraries(dispatch_attack_lib PRIVATE fakegpu_cuda fakegpu_nvml ${CMAKE_DL_LIBS})
  set_target_properties(dispatch_attack_lib PROPERTIES
    OUTPUT_NAME dispatch_attack LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/lib
    SKIP_BUILD_RPATH ON)
  # fakegpu's driver again, its entry points under a symbol version (DISPATCH_DRIVER_1),
  # as a driver linked with a named version script exports them: glibc's dlvsym finds
  # only versioned definitions, so this is the driver the dlvsym ways can reach.
  foreach(lib cuda nvml)
    set(soname libcuda.so.1)
    set(map libcuda.map)
    if(lib STREQUAL nvml)
      set(soname libnvidia-ml.so.1)
      set(map libnvidia-ml.map)
    endif()
    file(READ ${PROJECT_SOURCE_DIR}/src/fakegpu/${map} map_text)
    string(REPLACE "{" "DISPATCH_DRIVER_1 {" map_text "${map_text}")
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/dispatch_${map} "${map_text}")
    get_target_property(sources fakegpu_${lib} SOURCES)
    vgpu_preload_library(dispatch_versioned_${lib} ${CMAKE_CURRENT_BINARY_DIR}/dispatch_${map}
                         ${CMAKE_BINARY_DIR}/tests/versioned ${soname} ${sources})
    target_link_libraries(dispatch_versioned_${lib} PRIVATE fakegpu_state)
    add_dependencies(dispatch_attack_lib dispatch_versioned_${lib})
  endforeach()
  vgpu_program(dispatch_attack_link ${CMAKE_CURRENT_LIST_DIR}/dispatch_attack.c)
  target_compile_definitions(dispatch_attack_link PRIVATE DISPATCH_LINKED)
  target_link_libraries(dispatch_attack_link PRIVATE dispatch_attack_lib ${CMAKE_DL_LIBS})
  vgpu_program(dispatch_attack ${CMAKE_CURRENT_LIST_DIR}/dispatch_attack.c)
  target_link_libraries(dispatch_attack PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(dispatch_attack dispatch_attack_lib)
  # Memory: each way, the library linked and dlopened; the driver's truth within 1 GiB.
  set(dispatch_memory_cases link-next link-vnext link-default link-vdefault link-vhandle
                            link-indirect link-vindirect dlopen-next dlopen-vnext
                            dlopen-vdefault link-path link-dlmopen)
  foreach(case ${dispatch_memory_cases} early marker)
    add_test(NAME security.attacks.dispatch.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/dispatch_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.dispatch.${case} PROPERTIES
                         LABELS "security;attacks" TIMEOUT 60)
  endforeach()
  # Compute: launches found by RTLD_NEXT / dlvsym at a 30 % share, alone and beside a 70 %
  # neighbour, against fakegpu's timeline (about 4 s each).
  foreach(case compute-link-next compute-dlopen-vnext compute70-link-next)
    add_test(NAME security.attacks.dispatch.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/dispatch_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.dispatch.${case} PROPERTIES
                         LABELS "security;attacks;serial" TIMEOUT 120 RUN_SERIAL ON)
  endforeach()
endif()
