# vgpu-device-plugin benchmarks (bench/deviceplugin.sh): matching cost under callgrind.
if(TARGET vgpu_deviceplugin)
  vgpu_program(deviceplugin_match ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_match.c)
  set_target_properties(deviceplugin_match PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                      ${CMAKE_BINARY_DIR}/bench)
  target_link_libraries(deviceplugin_match PRIVATE vgpu_deviceplugin)
endif()
