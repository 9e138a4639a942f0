
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tests/fuzz/fuzz_parse_quantity.c" "tests/CMakeFiles/fuzz_parse_quantity.dir/fuzz/fuzz_parse_quantity.c.o" "gcc" "tests/CMakeFiles/fuzz_parse_quantity.dir/fuzz/fuzz_parse_quantity.c.o.d"
  "/work/main/tests/fuzz/replay.c" "tests/CMakeFiles/fuzz_parse_quantity.dir/fuzz/replay.c.o" "gcc" "tests/CMakeFiles/fuzz_parse_quantity.dir/fuzz/replay.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/src/base/CMakeFiles/vgpu_base.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
